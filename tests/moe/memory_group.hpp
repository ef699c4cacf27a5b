#pragma once
// Runs `body(member, communicator)` on every member of an in-process group
// (threads over comm::memory_communicator); `body` returns "" or what went
// wrong, and every member's answer is checked.

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tutti/comm/memory_communicator.hpp"

namespace tutti::testing {

template <class Body>
void on_memory_group(const std::string& prefix, int P, Body body) {
  static int round = 0;
  comm::memory_hub hub(0, P);
  const std::string name = prefix + std::to_string(round++);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(P);
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<comm::communicator> c;
      comm::memory_options o{name, std::chrono::seconds(20),
                             std::chrono::seconds(20)};
      auto made = comm::make_memory_communicator(hub, r, P, o, c);
      errors[r] = made.ok() ? body(r, *c) : made.message();
    });
  for (auto& t : threads)
    t.join();
  for (int r = 0; r < P; ++r) {
    INFO("member " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
}

} // namespace tutti::testing
