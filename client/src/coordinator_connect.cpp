#include "tutti/client/coordinator_connect.hpp"

#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <thread>

namespace tutti::client {

expected<coordinator_actor> connect_coordinator(caf::actor_system& sys,
                                                const endpoint& at) {
  auto handle = sys.middleman().remote_actor<coordinator_actor>(at.host,
                                                                at.port);
  if (!handle)
    return status::error("cannot reach the coordinator at " + at.text() + ": "
                         + sys.render(handle.error()));
  return *handle;
}

expected<coordinator_actor> connect_coordinator(
  caf::actor_system& sys, const endpoint& at,
  std::chrono::milliseconds patience, const std::function<bool()>& give_up) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    auto handle = connect_coordinator(sys, at);
    if (handle || std::chrono::steady_clock::now() >= deadline
        || (give_up && give_up()))
      return handle;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

expected<coordinator_actor> coordinator_via_daemon(
  caf::actor_system& sys, const endpoint& at,
  std::chrono::milliseconds timeout) {
  auto node = sys.middleman().remote_actor<node_supervisor_actor>(at.host,
                                                                  at.port);
  if (!node)
    return status::error("cannot reach a daemon at " + at.text() + ": "
                         + sys.render(node.error()));
  caf::scoped_actor self{sys};
  expected<coordinator_actor> out = status::error("the daemon at " + at.text()
                                                  + " did not answer");
  self->request(*node, timeout, get_coordinator_atom_v)
    .receive(
      [&](caf::actor& handle) {
        out = caf::actor_cast<coordinator_actor>(handle);
      },
      [&](caf::error& err) {
        out = status::error("the daemon at " + at.text() + ": "
                            + sys.render(err));
      });
  return out;
}

} // namespace tutti::client
