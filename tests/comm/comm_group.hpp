#pragma once
// Groups of communicators in one test process: n members of the in-process
// kind (a memory_hub) or of Gloo over loopback (a HashStore), made on n
// threads at once, as both kinds block until every member has joined.

#include <catch2/catch.hpp>

#include <gloo/rendezvous/hash_store.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tutti/comm/gloo_communicator.hpp"
#include "tutti/comm/memory_communicator.hpp"

namespace tutti::testing {

using comm_ptr = std::unique_ptr<comm::communicator>;

// `timeout` bounds each collective (and receive) of the group.
inline std::vector<comm_ptr>
make_group(bool memory, int n,
           std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  static int round = 0;
  const std::string name = "g" + std::to_string(round++);
  auto hub = std::make_shared<comm::memory_hub>(0, n);
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<comm_ptr> out(n);
  std::vector<status> made(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      if (memory) {
        comm::memory_options o{name, timeout, std::chrono::seconds(20)};
        made[r] = comm::make_memory_communicator(*hub, r, n, o, out[r]);
      } else {
        comm::gloo_options o{"127.0.0.1", name, timeout,
                             std::chrono::seconds(20), {}};
        made[r] = comm::make_gloo_communicator(*store, r, n, o, out[r]);
      }
    });
  for (auto& t : threads)
    t.join();
  for (auto& s : made)
    REQUIRE(s.ok());
  return out;
}

// Runs body(member) on every member at once.
inline void on_all(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back(body, r);
  for (auto& t : threads)
    t.join();
}

} // namespace tutti::testing
