#include "tutti/client/coordinator_connect.hpp"

#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <thread>

#include "tutti/runtime/node_tls.hpp"

namespace tutti::client {

namespace {

// The remote actor at `at`, through a TLS forwarder when TLS is installed.
template <class Handle>
expected<Handle> remote(caf::actor_system& sys, const endpoint& at,
                        const std::string& what) {
  auto handle = tutti::remote_actor<Handle>(sys, at.host, at.port);
  if (!handle)
    return status::error("cannot reach " + what + " at " + at.text() + ": "
                         + handle.message());
  return handle;
}

} // namespace

expected<coordinator_actor> connect_coordinator(caf::actor_system& sys,
                                                const endpoint& at) {
  return remote<coordinator_actor>(sys, at, "the coordinator");
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
  auto node = remote<node_supervisor_actor>(sys, at, "a daemon");
  if (!node)
    return node.error();
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
