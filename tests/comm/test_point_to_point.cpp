// Point-to-point sends (communicator::send / recv / wait_sends), in memory
// and over Gloo on loopback, as the interleaved pipeline uses them: three
// members in a ring each post two messages to the next and take the
// previous one's in the other order (a send never waits for its
// receiver); a receive of the wrong size is refused (memory); a receive
// whose message never comes ends at the timeout, and abort() ends one at
// once.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "comm_group.hpp"

using namespace tutti;
using namespace tutti::testing;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

} // namespace

TEST_CASE("sends around a ring arrive whatever order they are taken in",
          "[unit]") {
  for (bool memory : {true, false}) {
    INFO((memory ? "memory" : "gloo"));
    const int n = 3;
    auto group = make_group(memory, n);
    std::vector<status> result(n);
    std::vector<std::vector<float>> got(n);
    on_all(n, [&](int r) {
      // Member r sends r * 10 + tag under tags 1 and 2, the first longer.
      std::vector<float> one(64, float(r * 10 + 1)), two(8, float(r * 10 + 2));
      const int next = (r + 1) % n, prev = (r + n - 1) % n;
      status s = group[r]->send(next, 1, one.data(), one.size() * 4);
      if (s.ok())
        s = group[r]->send(next, 2, two.data(), two.size() * 4);
      std::vector<float> in_two(8), in_one(64);
      if (s.ok()) // the later message first
        s = group[r]->recv(prev, 2, in_two.data(), in_two.size() * 4);
      if (s.ok())
        s = group[r]->recv(prev, 1, in_one.data(), in_one.size() * 4);
      if (s.ok())
        s = group[r]->wait_sends();
      got[r] = {in_one.front(), in_one.back(), in_two.front(), in_two.back()};
      result[r] = s;
    });
    for (int r = 0; r < n; ++r) {
      INFO("member " << r << ": " << result[r].message());
      REQUIRE(result[r].ok());
      const float prev = float((r + n - 1) % n * 10);
      CHECK(got[r] == std::vector<float>{prev + 1, prev + 1, prev + 2,
                                         prev + 2});
    }
  }
}

TEST_CASE("a receive of the wrong size is refused", "[unit]") {
  auto group = make_group(true, 2);
  std::vector<float> out(4, 1.0f), in(3);
  REQUIRE(group[0]->send(1, 7, out.data(), out.size() * 4).ok());
  const auto got = group[1]->recv(0, 7, in.data(), in.size() * 4);
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.message(), Catch::Contains("sent 16 bytes under tag 7, "
                                            "12 expected"));
}

TEST_CASE("a receive ends at its timeout, and at once on abort", "[unit]") {
  for (bool memory : {true, false}) {
    INFO((memory ? "memory" : "gloo"));
    auto group = make_group(memory, 2, std::chrono::milliseconds(300));
    float x = 0;
    auto t0 = clock_type::now();
    const auto timed_out = group[1]->recv(0, 3, &x, sizeof x);
    CHECK_FALSE(timed_out.ok());
    CHECK(seconds_since(t0) < 5);
    INFO(timed_out.message());

    auto fresh = make_group(memory, 2, std::chrono::seconds(30));
    std::atomic<bool> done{false};
    status waited;
    std::thread waiter([&] {
      waited = fresh[1]->recv(0, 4, &x, sizeof x);
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK_FALSE(done.load());
    t0 = clock_type::now();
    CHECK(fresh[1]->abort().ok());
    waiter.join();
    CHECK_FALSE(waited.ok());
    CHECK(seconds_since(t0) < 2);
    CHECK_FALSE(fresh[1]->send(0, 5, &x, sizeof x).ok());
  }
}
