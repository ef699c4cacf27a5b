#pragma once
// Who sent the message an actor handles, by certificate: the middleman
// names the connection a remote node came in on (its loopback port behind
// the daemon's TLS guard), and security::peer_registry names whose
// certificate opened it. Senders in this process are trusted (they are
// this daemon's own actors, or `tutti run`'s).

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/node_id.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "tutti/security/identity.hpp"
#include "tutti/security/peer_registry.hpp"

namespace tutti {

struct sender_identity {
  bool local = false;                          // an actor of this process
  std::optional<security::identity> certified; // remote: its certificate
  std::string address;                         // remote: where it came from
};

// Asks the middleman about `node` and calls `then` with the answer (within
// 5 s; unknown when the middleman does not say).
template <class Self>
void identify_sender(Self* self, const caf::node_id& node,
                     std::function<void(sender_identity)> then) {
  if (!node || node == self->node()) {
    then(sender_identity{true, std::nullopt, "this process"});
    return;
  }
  auto middleman = self->system().middleman().actor_handle();
  self->request(middleman, std::chrono::seconds(5), caf::get_atom_v, node)
    .then(
      [then](const caf::node_id&, const std::string& host, uint16_t port) {
        sender_identity out;
        out.address = host + ":" + std::to_string(port);
        if (host == "127.0.0.1" || host == "::1")
          if (auto peer = security::peer_registry::find(port)) {
            out.certified = peer->who;
            out.address = peer->address;
          }
        then(std::move(out));
      },
      [then](const caf::error&) { then(sender_identity{}); });
}

} // namespace tutti
