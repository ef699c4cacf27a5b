#pragma once
// Gloo's rendezvous store over CAF: an actor holds the keys, and every
// member, in this process or on another node, reaches it through
// actor_store. The coordinator serves the same three messages for a
// training job (its handle converts to rendezvous_actor); a serving
// replica across daemons has no coordinator, so its node 0 spawns and
// publishes a rendezvous actor of its own.

#include <caf/actor_system.hpp>
#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "tutti/protocol/interfaces.hpp"

namespace tutti {

using rendezvous_actor = caf::typed_actor<
  caf::replies_to<store_set_atom, std::string, std::string>::with<caf::ok_atom>,
  caf::replies_to<store_get_atom, std::string>::with<std::string>,
  caf::replies_to<store_wait_atom,
                  std::vector<std::string>>::with<caf::ok_atom>>;

// Keys in memory; a get or wait for keys not yet set is answered when they
// are (the requester's timeout bounds it).
rendezvous_actor spawn_rendezvous(caf::actor_system& sys);

class actor_store final : public gloo::rendezvous::Store {
public:
  actor_store(caf::actor_system& sys, rendezvous_actor store,
              std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

private:
  caf::actor_system& sys_;
  rendezvous_actor store_;
  std::chrono::milliseconds timeout_;
};

} // namespace tutti
