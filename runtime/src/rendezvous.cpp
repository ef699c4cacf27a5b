#include "tutti/runtime/rendezvous.hpp"

#include "tutti/runtime/key_store.hpp"

#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace tutti {

namespace {

struct rendezvous_state {
  static inline const char* name = "rendezvous";
  key_store store;
};

rendezvous_actor::behavior_type rendezvous(
  rendezvous_actor::stateful_pointer<rendezvous_state> self) {
  return {
    store_set_handler(self),
    store_get_handler(self),
    store_wait_handler(self),
  };
}

} // namespace

rendezvous_actor spawn_rendezvous(caf::actor_system& sys) {
  return sys.spawn(rendezvous);
}

actor_store::actor_store(caf::actor_system& sys, rendezvous_actor store,
                         std::chrono::milliseconds timeout)
  : sys_(sys), store_(std::move(store)), timeout_(timeout) {}

// Gloo expects failures as exceptions; the communicator turns them into a
// status at its boundary.
void actor_store::set(const std::string& key, const std::vector<char>& data) {
  caf::scoped_actor self{sys_};
  self
    ->request(store_, timeout_, store_set_atom_v, key,
              std::string(data.begin(), data.end()))
    .receive([](caf::ok_atom) {},
             [&](caf::error& err) {
               throw std::runtime_error("rendezvous set '" + key
                                        + "': " + sys_.render(err));
             });
}

std::vector<char> actor_store::get(const std::string& key) {
  caf::scoped_actor self{sys_};
  std::vector<char> out;
  self->request(store_, timeout_, store_get_atom_v, key)
    .receive(
      [&](const std::string& value) { out.assign(value.begin(), value.end()); },
      [&](caf::error& err) {
        throw std::runtime_error("rendezvous get '" + key
                                 + "': " + sys_.render(err));
      });
  return out;
}

void actor_store::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void actor_store::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  caf::scoped_actor self{sys_};
  self->request(store_, timeout, store_wait_atom_v, keys)
    .receive([](caf::ok_atom) {},
             [&](caf::error& err) {
               throw std::runtime_error("rendezvous wait for "
                                        + std::to_string(keys.size())
                                        + " keys: " + sys_.render(err));
             });
}

} // namespace tutti
