#include "tutti/actors/local_job.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>

#include "tutti/actors/coordinator.hpp"
#include "tutti/actors/journal.hpp"
#include "tutti/actors/log.hpp"
#include "tutti/actors/node_supervisor.hpp"
#include "tutti/actors/system_config.hpp"

namespace tutti {

job_result run_local_job(const job_config& cfg, bool quiet,
                         const std::atomic<bool>& interrupt,
                         std::shared_ptr<store::job_store> db,
                         int64_t resume_step) {
  tutti_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};
  auto journal = spawn_journal(sys, cfg, std::move(db));
  auto coordinator = spawn_coordinator(
    sys, {cfg, caf::actor{self}, quiet, journal, resume_step});
  // Every node of the config in this process: the same ranks, groups and
  // data as the same config on nnodes daemons.
  std::vector<node_supervisor_actor> nodes;
  auto hub = std::make_shared<comm::memory_hub>(
    0, static_cast<int>(cfg.cluster.world_size));
  for (int64_t n = 0; n < cfg.cluster.nnodes; ++n)
    nodes.push_back(
      spawn_node_supervisor(sys, {cfg, n, coordinator, {}, nullptr, hub}));
  job_result result;
  bool finished = false, stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  while (!finished) {
    self->receive(
      [&](const job_outcome& done) {
        result = {done.ok, done.message, done.final_eval_loss};
        finished = true;
      },
      caf::after(std::chrono::milliseconds(200)) >>
        [&] {
          if (interrupt.load() && !stopping) {
            log_info("local_job", "interrupted: stopping at the next step");
            for (auto& n : nodes)
              self->send(n, stop_atom_v);
            stopping = true;
            stop_deadline = std::chrono::steady_clock::now()
                            + std::chrono::milliseconds(
                              2 * cfg.cluster.collective_timeout_ms);
          }
          if (std::chrono::steady_clock::now() > stop_deadline) {
            result = {false, "interrupted, and the ranks did not stop in time",
                      0};
            finished = true;
          }
        });
  }
  if (!result.ok) {
    // Ranks may be blocked in a collective whose peers are gone; the caller
    // exits the process rather than waiting for them.
    return result;
  }
  for (auto& n : nodes)
    self->send(n, stop_atom_v);
  self->send_exit(journal, caf::exit_reason::user_shutdown);
  return result;
}

} // namespace tutti
