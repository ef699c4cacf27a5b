// Escalation in a serving replica, as OTP escalates: expert shards killed
// faster than their supervisor's budget make it give up, the expert tier
// above it starts it again, shards and all, and the streams in flight go
// on to the tokens they would have had. A kill loop that outlasts the
// tier too fails the replica: it takes no more requests (503 at once) and
// says why, so the process can end non-zero (apps/serve_node.cpp; the
// command-level test is in test_serve_cli).

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "serve_requests.hpp"
#include "tutti/serve/ep_ranks.hpp"
#include "tutti/serve/service.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

using clock_type = std::chrono::steady_clock;

// Kills the ranks' shards in turn, `kills` times `every` apart (a kill
// that finds a shard down is not counted), until `done`.
std::thread kill_loop(serve::service& s, int kills,
                      std::chrono::milliseconds every,
                      std::atomic<int>& landed, std::atomic<bool>& done) {
  return std::thread([&s, kills, every, &landed, &done] {
    const auto deadline = clock_type::now() + std::chrono::seconds(30);
    for (int64_t r = 0; landed < kills && !done; ++r) {
      if (clock_type::now() > deadline)
        break;
      if (s.ranks()->kill_shard(r % s.ranks()->size()).ok())
        ++landed;
      std::this_thread::sleep_for(every);
    }
    done = true;
  });
}

} // namespace

TEST_CASE("20 expert shard kills in 3 s under load: the tier restarts, no "
          "stream fails or changes",
          "[unit]") {
  const auto js = served_jobs(8);
  const auto want = serve_all_jobs(*start_service(ep_limits(0)), js);
  auto svc = start_service(ep_limits(2));
  auto& s = *svc;
  std::atomic<int> landed{0};
  std::atomic<bool> done{false};
  auto killer = kill_loop(s, 20, std::chrono::milliseconds(150), landed,
                          done);
  // Load for as long as the kills go on: every round's streams complete
  // with the fault-free tokens.
  int rounds = 0;
  while (!done || rounds == 0) {
    check_same_outcomes(serve_all_jobs(s, js), want, js);
    ++rounds;
  }
  killer.join();
  CHECK(landed == 20);
  // 20 kills over a shards' budget of 3 a minute: the tier restarted the
  // shards' supervisor, and the replica is ready again.
  CHECK(s.ranks()->tier_restarts() >= 1);
  CHECK(s.failure().empty());
  CHECK(s.ready());
  const auto deadline = clock_type::now() + std::chrono::seconds(10);
  while (!s.shards_up() && clock_type::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(s.shards_up());
  check_same_outcomes(serve_all_jobs(s, js), want, js);
  INFO(rounds << " rounds of 8 requests under the kills");
  CHECK(s.metrics().gauges().expert_tier_restarts
        == s.ranks()->tier_restarts());
}

TEST_CASE("a kill loop past every budget fails the replica: 503 at once",
          "[unit]") {
  auto l = ep_limits(2);
  l.expert_tier_restarts = 1; // the second give-up of the shards fails it
  auto svc = start_service(l);
  auto& s = *svc;
  std::atomic<int> landed{0};
  std::atomic<bool> done{false};
  auto killer = kill_loop(s, 1000, std::chrono::milliseconds(5), landed,
                          done);
  const auto deadline = clock_type::now() + std::chrono::seconds(20);
  while (s.failure().empty() && clock_type::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  done = true;
  killer.join();
  INFO(landed << " kills");
  REQUIRE_FALSE(s.failure().empty());
  CHECK(s.failure().find("the expert tier gave up") != std::string::npos);
  CHECK_FALSE(s.ready());
  CHECK_FALSE(s.shards_up());
  // A request now is refused at once, not after a step's timeout.
  const auto asked = clock_type::now();
  auto r = std::make_unique<serve::request>();
  r->prompt = {1, 2, 3};
  r->max_tokens = 4;
  auto sub = s.submit(std::move(r));
  CHECK(sub.refused.http_status == 503);
  CHECK(clock_type::now() - asked < std::chrono::milliseconds(100));
}
