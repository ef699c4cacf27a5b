#pragma once
// supervisor: Erlang/OTP supervision on CAF monitors. A supervisor starts
// its children in order, monitors them, and restarts them by its strategy:
//   one_for_one   only the child that ended;
//   rest_for_one  that child and every child started after it;
//   one_for_all   every child.
// Each child's restart type decides whether it comes back: permanent
// always, transient only after an abnormal exit, temporary never. More than
// max_restarts restarts within period_ms and the supervisor gives up: it
// stops every child (last started first), tells its parent
// (escalate_atom, why) and ends with an error.

#include <caf/actor.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tutti/protocol/interfaces.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti {

// restart_strategy, restart_type and their to_string: tutti/config/enums.hpp.

struct child_spec {
  std::string id; // e.g. "expert_shard/3"
  restart_type restart = restart_type::permanent;
  std::function<caf::actor(caf::actor_system&)> start;
};

// Restart intensity: more than max_restarts within period gives up. The
// defaults are those of a `supervision:` entry left out (job_config.hpp).
struct supervisor_flags {
  restart_strategy strategy = supervision_spec{}.strategy;
  int64_t max_restarts = supervision_spec{}.max_restarts;
  std::chrono::milliseconds period = supervision_spec{}.period();
};

// which_child: the running handle of a child by id (an error while it is
// down for good).
// The flags and the children's restart type a `supervision:` entry names.
supervisor_flags flags_of(const supervision_spec& spec);
restart_type restart_of(const supervision_spec& spec);

using supervisor_actor = caf::typed_actor<
  caf::replies_to<children_atom>::with<std::vector<child_status>>,
  caf::replies_to<which_child_atom, std::string>::with<caf::actor>,
  caf::reacts_to<stop_atom>>;

// `parent` receives child_restarted{child id, why} after each restart and
// (escalate_atom, why) when the supervisor gives up.
// Keep the returned handle: CAF ends an actor that no handle reaches.
supervisor_actor spawn_supervisor(caf::actor_system& sys, std::string name,
                                  supervisor_flags flags,
                                  std::vector<child_spec> children,
                                  caf::actor parent);

} // namespace tutti
