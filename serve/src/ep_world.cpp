#include "ep_world.hpp"

#include <caf/io/middleman.hpp>

#include <thread>

#include "tutti/runtime/node_tls.hpp"
#include "tutti/runtime/rendezvous.hpp"
#include "tutti/comm/gloo_communicator.hpp"

namespace tutti::serve {

namespace {

// Node 0's rendezvous from another node, retried every 250 ms.
expected<rendezvous_actor> find_rendezvous(caf::actor_system& sys,
                                           const std::string& host,
                                           uint16_t port,
                                           std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto handle = remote_actor<rendezvous_actor>(sys, host, port);
    if (handle)
      return handle;
    if (std::chrono::steady_clock::now() >= deadline)
      return status::error("no rendezvous of node 0 at " + host + ":"
                           + std::to_string(port) + " within "
                           + std::to_string(timeout.count())
                           + " ms: " + handle.message());
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

} // namespace

void daemon_world::close(caf::actor_system& sys) {
  guard.reset();
  if (!rendezvous)
    return;
  sys.middleman().unpublish(rendezvous, port);
  caf::anon_send_exit(rendezvous, caf::exit_reason::user_shutdown);
  rendezvous = nullptr;
}

expected<daemon_world> connect_across_daemons(
  caf::actor_system& sys, const ep_cluster& cluster,
  std::chrono::milliseconds timeout, const basp_guard::tls_options& tls) {
  const auto node = cluster.node_rank;
  if (node < 0 || node >= static_cast<int64_t>(cluster.nodes.size()))
    return status::error("node rank " + std::to_string(node) + " of "
                         + std::to_string(cluster.nodes.size()) + " nodes");
  daemon_world world;
  rendezvous_actor local;
  if (node == 0) {
    local = spawn_rendezvous(sys);
    auto port = sys.middleman().publish(local, 0, "127.0.0.1", true);
    if (!port) {
      caf::anon_send_exit(local, caf::exit_reason::user_shutdown);
      return status::error("cannot listen on loopback: "
                           + sys.render(port.error()));
    }
    world.rendezvous = local;
    world.port = *port;
    if (auto s = basp_guard::start(
          cluster.nodes[0], static_cast<uint16_t>(cluster.rendezvous_port),
          *port, world.guard, tls);
        !s.ok()) {
      world.close(sys);
      return status::error("serve.rendezvous_port: cannot listen on "
                           + cluster.nodes[0] + ":"
                           + std::to_string(cluster.rendezvous_port) + ": "
                           + s.message());
    }
  }
  world.connect = connect_fn(
    [&sys, cluster, timeout, local](
      int rank, int size, std::unique_ptr<comm::communicator>& out) -> status {
      auto store = local;
      if (!store) {
        auto found = find_rendezvous(sys, cluster.nodes[0],
                                     cluster.rendezvous_port, timeout);
        if (!found)
          return found.error();
        store = *found;
      }
      actor_store gloo_store(sys, store, timeout);
      comm::gloo_options o;
      o.host = cluster.nodes[cluster.node_rank];
      // The group's size in its name: daemons whose serve.ep_size
      // differ fail to meet at once instead of clashing on rank keys.
      o.group = "serve/" + std::to_string(size);
      o.timeout = timeout;
      o.connect_timeout = timeout;
      o.members = cluster.nodes;
      auto made = comm::make_gloo_communicator(gloo_store, rank, size, o, out);
      if (!made.ok())
        return status::error(
          "joining the replica's " + std::to_string(size)
          + " ranks (serve.nodes x serve.ep_size) through node 0's "
            "rendezvous: "
          + made.message()
          + "; every daemon needs the same serve config, and all of them up");
      return made;
    });
  return world;
}

} // namespace tutti::serve
