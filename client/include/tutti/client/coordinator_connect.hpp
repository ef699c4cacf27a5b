#pragma once
// Connecting to a job's coordinator on an actor system that has the io
// middleman loaded (tutti_system_config with network = true). job_client
// uses these; so does a daemon, which hosts its own actors on that system.

#include <caf/actor_system.hpp>

#include <chrono>
#include <functional>

#include "tutti/protocol/interfaces.hpp"
#include "tutti/base/status.hpp"
#include "tutti/client/target.hpp"

namespace tutti::client {

// The coordinator listening at `at`. Fails with "cannot reach the
// coordinator at HOST:PORT: <why>".
expected<coordinator_actor> connect_coordinator(caf::actor_system& sys,
                                                const endpoint& at);

// The same, retried every 250 ms until it answers, `patience` has passed or
// `give_up()` holds: daemons start in any order, and a coordinator may
// restart. The failure is the last attempt's.
expected<coordinator_actor> connect_coordinator(
  caf::actor_system& sys, const endpoint& at,
  std::chrono::milliseconds patience,
  const std::function<bool()>& give_up = {});

// The coordinator's handle as the node daemon at `at` hands it out, so that
// any daemon of a job is a way in.
expected<coordinator_actor> coordinator_via_daemon(
  caf::actor_system& sys, const endpoint& at,
  std::chrono::milliseconds timeout);

} // namespace tutti::client
