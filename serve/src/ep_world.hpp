#pragma once
// How the ranks of a serving replica across daemons find each other: node
// 0 spawns a rendezvous actor and publishes it on serve.rendezvous_port;
// every node's rank reaches it (over CAF's middleman, retried until the
// timeout, as daemons start in any order) and joins a Gloo group through
// it, the way a training job's ranks join through the coordinator.

#include <caf/actor_system.hpp>

#include "ep_actors.hpp"
#include "tutti/serve/ep_ranks.hpp"

namespace tutti::serve {

// Node 0: publishes the rendezvous now (failing if the port is taken).
// The function joins the calling rank to the group within `timeout`.
expected<connect_fn> connect_across_daemons(caf::actor_system& sys,
                                            const ep_cluster& cluster,
                                            std::chrono::milliseconds timeout);

} // namespace tutti::serve
