#include "coordinator/coordinator_store.hpp"

#include <caf/scoped_actor.hpp>

#include <stdexcept>

namespace tutti {

coordinator_store::coordinator_store(caf::actor_system& sys,
                                     coordinator_actor coordinator,
                                     std::chrono::milliseconds timeout)
  : sys_(sys), coordinator_(std::move(coordinator)), timeout_(timeout) {}

// Gloo expects failures as exceptions; the communicator turns them into a
// status at its boundary.
void coordinator_store::set(const std::string& key,
                            const std::vector<char>& data) {
  caf::scoped_actor self{sys_};
  self
    ->request(coordinator_, timeout_, store_set_atom_v, key,
              std::string(data.begin(), data.end()))
    .receive([](caf::ok_atom) {},
             [&](caf::error& err) {
               throw std::runtime_error("rendezvous set '" + key
                                        + "': " + sys_.render(err));
             });
}

std::vector<char> coordinator_store::get(const std::string& key) {
  caf::scoped_actor self{sys_};
  std::vector<char> out;
  self->request(coordinator_, timeout_, store_get_atom_v, key)
    .receive(
      [&](const std::string& value) { out.assign(value.begin(), value.end()); },
      [&](caf::error& err) {
        throw std::runtime_error("rendezvous get '" + key
                                 + "': " + sys_.render(err));
      });
  return out;
}

void coordinator_store::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void coordinator_store::wait(const std::vector<std::string>& keys,
                             const std::chrono::milliseconds& timeout) {
  caf::scoped_actor self{sys_};
  self->request(coordinator_, timeout, store_wait_atom_v, keys)
    .receive([](caf::ok_atom) {},
             [&](caf::error& err) {
               throw std::runtime_error("rendezvous wait for "
                                        + std::to_string(keys.size())
                                        + " keys: " + sys_.render(err));
             });
}

} // namespace tutti
