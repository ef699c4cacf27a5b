#pragma once
// How the ranks of a serving replica across daemons find each other: node
// 0 spawns a rendezvous actor and publishes it on serve.rendezvous_port;
// every node's rank reaches it (over CAF's middleman, retried until the
// timeout, as daemons start in any order) and joins a Gloo group through
// it, the way a training job's ranks join through the coordinator.

#include <caf/actor_system.hpp>

#include "ep_actors.hpp"
#include "tutti/runtime/basp_guard.hpp"
#include "tutti/runtime/rendezvous.hpp"
#include "tutti/serve/ep_ranks.hpp"

namespace tutti::serve {

struct daemon_world {
  connect_fn connect; // joins the calling rank to the group in `timeout`
  // Node 0's rendezvous, published on loopback (`port`) behind a guard on
  // serve.rendezvous_port, as a daemon's actors are (basp_guard.hpp),
  // until close(): a published actor would keep the actor system, and so
  // the process, alive.
  rendezvous_actor rendezvous;
  uint16_t port = 0;
  std::unique_ptr<basp_guard> guard;
  void close(caf::actor_system& sys);
};

// Node 0: publishes the rendezvous now (failing if the port is taken).
// With `tls` (its endpoint set), the rendezvous's guard runs mutual TLS
// first, and the others reach it through security::tls_dialer.
expected<daemon_world> connect_across_daemons(
  caf::actor_system& sys, const ep_cluster& cluster,
  std::chrono::milliseconds timeout, const basp_guard::tls_options& tls = {});

} // namespace tutti::serve
