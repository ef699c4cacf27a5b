// tutti diag CONFIG: the interconnect check across the running daemons of
// a config. Exit 0 healthy, 3 when stragglers are named, 1 when the check
// could not run, 2 on bad input.

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <cstdio>

#include "commands.hpp"
#include "tutti/actors/interfaces.hpp"
#include "tutti/actors/system_config.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti::cli {

int diag_command(const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-') {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
      std::printf("usage: tutti diag CONFIG\n");
      return 0;
    }
    return fail(2, "diag: usage: tutti diag CONFIG");
  }
  auto loaded = load_job_config(args[0]);
  if (!loaded)
    return fail(2, "config: " + loaded.message());
  job_config cfg = std::move(*loaded);
  system_options opt;
  opt.network = true;
  tutti_system_config sys_cfg{opt};
  caf::actor_system sys{sys_cfg};
  auto coordinator = sys.middleman().remote_actor<coordinator_actor>(
    cfg.cluster.coordinator_host(),
    static_cast<uint16_t>(cfg.cluster.coordinator_port()));
  if (!coordinator)
    return fail(1, "diag: cannot reach the coordinator at "
                     + cfg.cluster.coordinator + ": "
                     + sys.render(coordinator.error()));
  caf::scoped_actor self{sys};
  int status = 1;
  // Each pair and size takes a few collectives; bound the wait by the
  // collective timeout with room for all of them.
  auto timeout = std::chrono::milliseconds(cfg.cluster.collective_timeout_ms)
                 + std::chrono::seconds(30 * cfg.cluster.nnodes);
  self->request(*coordinator, timeout, diag_atom_v)
    .receive(
      [&](const diag_report& report) {
        std::fputs(report.text.c_str(), stdout);
        status = !report.ok ? 1 : report.stragglers.empty() ? 0 : 3;
      },
      [&](caf::error& err) {
        status = fail(1, "diag: " + sys.render(err));
      });
  return status;
}

} // namespace tutti::cli
