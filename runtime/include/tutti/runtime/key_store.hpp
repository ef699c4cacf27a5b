#pragma once
// The rendezvous key-value store the ranks' Gloo groups meet through: the
// state and the three handlers that the coordinator (training) and the
// serving rendezvous actor share. A get or wait for a key not set yet is
// answered when it is (the requester's timeout bounds the wait).

#include <caf/error.hpp>
#include <caf/result.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tutti/protocol/type_ids.hpp"

namespace tutti {

struct key_store {
  std::map<std::string, std::string> values;
  std::multimap<std::string, caf::typed_response_promise<std::string>> gets;
  struct pending_wait {
    std::vector<std::string> keys;
    caf::typed_response_promise<caf::ok_atom> promise;
  };
  std::vector<pending_wait> waits;

  bool has_all(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const auto& k) { return values.count(k) > 0; });
  }

  void set(const std::string& key, const std::string& value) {
    values[key] = value;
    auto range = gets.equal_range(key);
    for (auto i = range.first; i != range.second; ++i)
      i->second.deliver(value);
    gets.erase(range.first, range.second);
    auto ready = std::partition(
      waits.begin(), waits.end(),
      [&](const pending_wait& w) { return !has_all(w.keys); });
    for (auto i = ready; i != waits.end(); ++i)
      i->promise.deliver(caf::ok_atom_v);
    waits.erase(ready, waits.end());
  }

  template <class Self>
  caf::result<std::string> get(Self* self, const std::string& key) {
    if (auto i = values.find(key); i != values.end())
      return i->second;
    auto promise = self->template make_response_promise<std::string>();
    gets.emplace(key, promise);
    return promise;
  }

  template <class Self>
  caf::result<caf::ok_atom> wait(Self* self,
                                 const std::vector<std::string>& keys) {
    if (has_all(keys))
      return caf::ok_atom_v;
    auto promise = self->template make_response_promise<caf::ok_atom>();
    waits.push_back({keys, promise});
    return promise;
  }

  // Forgets every key; whoever still waits gets `why`.
  void clear(const caf::error& why) {
    values.clear();
    for (auto& [key, promise] : gets)
      promise.deliver(why);
    for (auto& w : waits)
      w.promise.deliver(why);
    gets.clear();
    waits.clear();
  }
};

// The handlers of the three rendezvous messages over `self->state.store`,
// for an actor's behavior: all of the serving rendezvous actor's, and a
// part of the coordinator's.
template <class Self>
auto store_set_handler(Self* self) {
  return [self](store_set_atom, const std::string& key,
                const std::string& value) -> caf::ok_atom {
    self->state.store.set(key, value);
    return caf::ok_atom_v;
  };
}

template <class Self>
auto store_get_handler(Self* self) {
  return [self](store_get_atom,
                const std::string& key) -> caf::result<std::string> {
    return self->state.store.get(self, key);
  };
}

template <class Self>
auto store_wait_handler(Self* self) {
  return [self](store_wait_atom, const std::vector<std::string>& keys)
           -> caf::result<caf::ok_atom> {
    return self->state.store.wait(self, keys);
  };
}

} // namespace tutti
