#include "tutti/actors/local_job.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>

#include "tutti/actors/coordinator.hpp"
#include "tutti/actors/node_supervisor.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

namespace {

struct tutti_system_config : caf::actor_system_config {
  tutti_system_config() {
    add_message_types<caf::id_block::tutti>();
    // (CAF 0.17.6's add_error_category<T> does not compile; give the
    // renderer explicitly.)
    add_error_category(caf::atom("tutti"),
                       [](uint8_t code, caf::atom_value,
                          const caf::message& context) {
                         std::string out = "tutti: ";
                         out += to_string(static_cast<errc>(code));
                         if (!context.empty())
                           out += " " + caf::to_string(context);
                         return out;
                       });
    // Actors log through the project's logger; keep CAF quiet on stdout.
    set("logger.console", caf::atom("none"));
  }
};

} // namespace

job_result run_local_job(const job_config& cfg, bool quiet,
                         const std::atomic<bool>& interrupt) {
  tutti_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};
  auto coordinator = spawn_coordinator(sys, {cfg, caf::actor{self}, quiet});
  auto supervisor = spawn_node_supervisor(sys, {cfg, 0, coordinator});
  job_result result;
  bool finished = false;
  while (!finished) {
    self->receive(
      [&](job_done_atom, bool ok, const std::string& why, double eval_loss) {
        result = {ok, why, eval_loss};
        finished = true;
      },
      caf::after(std::chrono::milliseconds(200)) >> [&] {
        if (interrupt.load()) {
          result = {false, "interrupted", 0};
          finished = true;
        }
      });
  }
  if (!result.ok) {
    // Ranks may be blocked in a collective whose peers are gone; the caller
    // exits the process rather than waiting for them.
    return result;
  }
  self->send(supervisor, stop_atom_v);
  return result;
}

} // namespace tutti
