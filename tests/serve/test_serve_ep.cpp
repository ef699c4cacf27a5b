// Expert-parallel serving on actors: a replica of 2 (and 4) rank actors, each
// with its KV cache and expert shard, gives the same tokens and
// log-probabilities as the one-rank engine for concurrent greedy and seeded
// requests, for a Mixtral and a Qwen3-MoE model and one with shared experts
// and a leading dense layer; an expert shard that fails
// mid-generation is restarted by its supervisor and every stream completes with
// exactly the tokens it would have had, none dropped, none recomputed from
// scratch. A group of one runs its shard's tasks on the rank's thread,
// and its shard's faults still take effect.

#include <catch2/catch.hpp>

#include <thread>

#include "serve_requests.hpp"
#include "tutti/serve/service.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

std::vector<served_outcome> reference(
  const std::vector<served_job>& js,
  serve::served_model model = eight_expert_model()) {
  auto svc = start_service(ep_limits(0), std::move(model));
  return serve_all_jobs(*svc, js);
}

} // namespace

TEST_CASE("expert-parallel ranks give the one-rank engine's tokens", "[unit]") {
  const auto js = served_jobs(12);
  // Mixtral, Qwen3-MoE, and Mixtral with DeepSeek-V3's shared experts and a
  // leading dense layer (run on every rank for its own rows).
  const int kind = GENERATE(0, 1, 2);
  auto model = [&] {
    return kind == 1   ? eight_expert_qwen3_model()
           : kind == 2 ? eight_expert_feed_forward_model()
                       : eight_expert_model();
  };
  const auto want = reference(js, model());
  for (int64_t ranks : {1, 2, 4}) {
    INFO((kind == 1   ? "Qwen3-MoE, "
          : kind == 2 ? "shared experts, dense layer, "
                      : "Mixtral, ")
         << ranks << " ranks");
    auto svc = start_service(ep_limits(ranks), model());
    auto& s = *svc;
    CHECK(s.shards_up());
    check_same_outcomes(serve_all_jobs(s, js), want, js);
    CHECK(s.ranks()->exchanged_bytes() > 0);
    // Every rank's blocks are free again (cached prompt blocks count as
    // free: no request holds them).
    for (int64_t r = 0; r < s.ranks()->size(); ++r)
      CHECK(s.ranks()->cache(r).used_blocks() == 0);
    s.stop();
    CHECK(s.kv_blocks() > 0);
  }
}

TEST_CASE("a rank count that does not divide the experts is refused",
          "[unit]") {
  auto svc = serve::service::create(eight_expert_model(), ep_limits(3));
  REQUIRE_FALSE(svc.ok());
  CHECK(svc.message().find("ep_size 3") != std::string::npos);
}

TEST_CASE("an expert shard killed mid-generation: every stream complete and "
          "unchanged",
          "[unit]") {
  const auto js = served_jobs(8);
  const auto want = reference(js);
  auto svc = serve::service::create(eight_expert_model(), ep_limits(2));
  REQUIRE(svc.ok());
  auto& s = *svc.value();
  // Rank 1's shard fails on its 12th task (layer 2 of the 6th step), rank
  // 0's on its 31st: prompts are prefilled by then, decoding is under way.
  REQUIRE(s.ranks()->inject_fault(1, "raise_expert@12").ok());
  REQUIRE(s.ranks()->inject_fault(0, "raise_expert@31").ok());
  s.start();
  auto got = serve_all_jobs(s, js);
  check_same_outcomes(got, want, js);
  s.stop();
  CHECK(s.ranks()->shard_restarts() == 2);
  CHECK(s.preemptions() == 0); // none recomputed from scratch
  // The supervisor's restarted shards serve the next requests too, the
  // prompts now from the ranks' prefix caches.
  s.start();
  CHECK(s.shards_up());
  check_same_outcomes(serve_all_jobs(s, js), want, js);
  CHECK(s.metrics().gauges().prefix_cache_hit_tokens > 0);
  CHECK(s.metrics().gauges().expert_shard_restarts == 2);
}

TEST_CASE("a group of one runs its shard's tasks on its own thread; a fault "
          "armed on the shard and a killed shard are met as before",
          "[unit]") {
  const auto js = served_jobs(8);
  const auto want = reference(js);
  auto svc = serve::service::create(eight_expert_model(), ep_limits(1));
  REQUIRE(svc.ok());
  auto& s = *svc.value();
  // Armed, the shard takes the tasks itself and fails on the 12th.
  REQUIRE(s.ranks()->inject_fault(0, "raise_expert@12").ok());
  s.start();
  check_same_outcomes(serve_all_jobs(s, js), want, js);
  s.stop();
  CHECK(s.ranks()->shard_restarts() == 1);
  CHECK(s.preemptions() == 0);
  // Killed between requests: the rank sees its shard gone, takes the
  // restarted one, and the tokens are the same.
  REQUIRE(s.ranks()->kill_shard(0).ok());
  s.start();
  check_same_outcomes(serve_all_jobs(s, js), want, js);
  CHECK(s.shards_up());
  s.stop();
  CHECK(s.ranks()->shard_restarts() == 2);
}
