#include "tutti/train/local_job.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>

#include "tutti/train/coordinator.hpp"
#include "tutti/train/job_dashboard.hpp"
#include "tutti/train/journal.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/runtime/node_endpoint.hpp"
#include "tutti/train/node_supervisor.hpp"
#include "tutti/runtime/system_config.hpp"
#include "tutti/kernels/blas_core.hpp"
#include "tutti/lifecycle/environment.hpp"
#include "tutti/security/web_config.hpp"

namespace tutti {

namespace {

// A client command (status, shell, logs, chaos) reaches this process as it
// would a daemon: the coordinator on the config's coordinator port, each
// node supervisor on its node's port, all on loopback. A port another
// process holds costs only these ways in, not the job.
void listen_for_clients(caf::actor_system& sys, const job_config& cfg,
                        const coordinator_actor& coordinator,
                        const std::vector<node_supervisor_actor>& nodes,
                        std::vector<std::unique_ptr<basp_guard>>& guards) {
  const std::string loopback = "127.0.0.1";
  auto tell = [](const std::string& what, int64_t port, const status& s) {
    if (s.ok())
      log_info("local_job",
               what + " listening on 127.0.0.1:" + std::to_string(port));
    else
      log_warn("local_job",
               what
                 + ": no client commands on 127.0.0.1:" + std::to_string(port)
                 + " (cluster_config.coordinator, " + "nodes): " + s.message());
  };
  const auto port = cfg.cluster.coordinator_port();
  auto published = publish_guarded(sys, coordinator, loopback, port, guards);
  tell("coordinator", port, published);
  if (!published.ok())
    return;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const auto at = cfg.cluster.node(static_cast<int64_t>(n)).port;
    tell("node " + std::to_string(n), at,
         publish_guarded(sys, nodes[n], loopback, at, guards));
  }
}

} // namespace

job_result run_local_job(const job_config& cfg, bool quiet,
                         const std::atomic<bool>& interrupt,
                         std::shared_ptr<store::job_store> db,
                         int64_t resume_step) {
  // Networked: clients connect as to a daemon.
  tutti_system_config sys_cfg{network_options(cfg.recovery)};
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};
  std::vector<std::unique_ptr<basp_guard>> guards; // outlive their use
  // /metrics and /dashboard as the daemons serve them: node N on
  // metrics.port + N, node 0 with the job's families and events.
  auto job_board = std::make_shared<metrics_board>();
  std::vector<std::shared_ptr<metrics_board>> node_boards;
  std::vector<std::unique_ptr<net::metrics_endpoint>> servers;
  security::web_config web; // none: plain HTTP, no auth
  if (cfg.metrics.port > 0 && !cfg.metrics.web_config.empty()) {
    auto loaded = security::load_web_config(cfg.metrics.web_config);
    if (!loaded)
      return {false, "metrics.web_config: " + loaded.message(), 0};
    web = std::move(*loaded);
  }
  for (int64_t n = 0; n < cfg.cluster.nnodes; ++n) {
    node_boards.push_back(std::make_shared<metrics_board>());
    if (cfg.metrics.port <= 0)
      continue;
    std::vector<std::shared_ptr<metrics_board>> boards;
    if (n == 0)
      boards.push_back(job_board);
    boards.push_back(node_boards.back());
    auto store = std::make_shared<job_store_slot>();
    if (n == 0)
      store->set(db);
    auto page = dashboard::routes(job_dashboard(cfg, boards, store));
    auto started = serve_metrics("127.0.0.1", cfg.metrics.port + n, boards, web,
                                 page);
    if (!started)
      return {false, started.message(), 0};
    servers.push_back(std::move(*started));
  }
  // Every node of this process runs with the same: checked for the record
  // (tutti diag shows it), read once.
  const auto environment = lifecycle::environment_lines(
    lifecycle::node_environment(cfg, kernels::blas_core_name()));
  auto journal = spawn_journal(sys, cfg, std::move(db));
  auto coordinator = spawn_coordinator(
    sys, {cfg, caf::actor{self}, quiet, journal, resume_step,
          cfg.metrics.port > 0 ? job_board : nullptr, environment});
  // Every node of the config in this process: the same ranks, groups and
  // data as the same config on nnodes daemons.
  std::vector<node_supervisor_actor> nodes;
  auto hub = std::make_shared<comm::memory_hub>(
    0, static_cast<int>(cfg.cluster.world_size));
  for (int64_t n = 0; n < cfg.cluster.nnodes; ++n)
    nodes.push_back(spawn_node_supervisor(
      sys, {cfg,
            n,
            coordinator,
            {},
            cfg.metrics.port > 0 ? node_boards[n] : nullptr,
            hub,
            environment}));
  listen_for_clients(sys, cfg, coordinator, nodes, guards);
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
