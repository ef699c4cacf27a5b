// Expert-parallel serving on actors: a replica of 2 (and 4) rank actors,
// each with its KV cache and expert shard, gives the same tokens and
// log-probabilities as the one-rank engine for concurrent greedy and seeded
// requests; an expert shard that fails mid-generation is restarted by its
// supervisor and every stream completes with exactly the tokens it would
// have had, none dropped, none recomputed from scratch.

#include <catch2/catch.hpp>

#include <thread>

#include "serve_test_support.hpp"
#include "tutti/serve/service.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

serve::served_model ep_model() {
  // 8 experts top-2: 2 ranks hold 4 each, 4 ranks 2 each.
  return random_served_model(
    "serve_ep_model", serve_test_config(64, 32, 48, 2, 4, 2, 8, 2, 96), 41);
}

struct outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  serve::finish_reason finish = serve::finish_reason::none;
  std::string error;
};

struct job {
  std::vector<int32_t> prompt;
  int64_t max_tokens;
  serve::sampling_params sampling;
};

std::vector<job> jobs(int n) {
  std::vector<job> out;
  std::mt19937 rng(5);
  for (int i = 0; i < n; ++i) {
    job j;
    const int len = 3 + static_cast<int>(rng() % 30);
    for (int t = 0; t < len; ++t)
      j.prompt.push_back(static_cast<int32_t>(rng() % 64));
    j.max_tokens = 8 + static_cast<int64_t>(rng() % 16);
    j.sampling.temperature = (i % 2) ? 0.0 : 0.9;
    j.sampling.top_p = 0.95;
    j.sampling.seed = 1000 + i;
    out.push_back(j);
  }
  return out;
}

serve::service_limits limits(int64_t ranks) {
  serve::service_limits l;
  l.ep_ranks = ranks;
  l.batch = {40, 16}; // forces chunked prefill
  l.max_queue = 64;
  l.kv_cache_bytes = 4 << 20;
  l.step_timeout_s = 20;
  return l;
}

// Submits every job at once; `during(tokens so far)` runs between events.
std::vector<outcome> serve_all(
  serve::service& svc, const std::vector<job>& js,
  const std::function<void(int64_t)>& during = nullptr) {
  std::vector<serve::service::submission> subs;
  for (const auto& j : js) {
    auto r = std::make_unique<serve::request>();
    r->prompt = j.prompt;
    r->max_tokens = j.max_tokens;
    r->sampling = j.sampling;
    subs.push_back(svc.submit(std::move(r)));
    REQUIRE(subs.back().refused.http_status == 0);
  }
  std::vector<outcome> out(js.size());
  int64_t seen = 0;
  const auto deadline = std::chrono::steady_clock::now()
                        + std::chrono::seconds(120);
  for (size_t i = 0; i < subs.size(); ++i)
    while (out[i].finish == serve::finish_reason::none) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      serve::request_event ev;
      if (!subs[i].stream->next(ev, std::chrono::seconds(5)))
        continue;
      for (const auto& t : ev.tokens) {
        out[i].tokens.push_back(t.token);
        out[i].logprobs.push_back(t.logprob);
      }
      seen += static_cast<int64_t>(ev.tokens.size());
      out[i].finish = ev.finish;
      out[i].error = ev.error;
      if (during)
        during(seen);
    }
  return out;
}

std::vector<outcome> reference(const std::vector<job>& js) {
  auto svc = serve::service::create(ep_model(), limits(0));
  REQUIRE(svc.ok());
  svc.value()->start();
  return serve_all(*svc.value(), js);
}

void check_same(const std::vector<outcome>& got,
                const std::vector<outcome>& want, const std::vector<job>& js) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("request " << i << ": " << got[i].error);
    CHECK(got[i].finish == serve::finish_reason::length);
    CHECK(static_cast<int64_t>(got[i].tokens.size()) == js[i].max_tokens);
    CHECK(got[i].tokens == want[i].tokens);
    CHECK(got[i].logprobs == want[i].logprobs);
  }
}

} // namespace

TEST_CASE("expert-parallel ranks give the one-rank engine's tokens", "[unit]") {
  const auto js = jobs(12);
  const auto want = reference(js);
  for (int64_t ranks : {1, 2, 4}) {
    INFO(ranks << " ranks");
    auto svc = serve::service::create(ep_model(), limits(ranks));
    REQUIRE(svc.ok());
    auto& s = *svc.value();
    s.start();
    CHECK(s.shards_up());
    check_same(serve_all(s, js), want, js);
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
  auto svc = serve::service::create(ep_model(), limits(3));
  REQUIRE_FALSE(svc.ok());
  CHECK(svc.message().find("ep_size 3") != std::string::npos);
}

TEST_CASE("an expert shard killed mid-generation: every stream complete and "
          "unchanged",
          "[unit]") {
  const auto js = jobs(8);
  const auto want = reference(js);
  auto svc = serve::service::create(ep_model(), limits(2));
  REQUIRE(svc.ok());
  auto& s = *svc.value();
  // Rank 1's shard fails on its 12th task (layer 2 of the 6th step), rank
  // 0's on its 31st: prompts are prefilled by then, decoding is under way.
  REQUIRE(s.ranks()->inject_fault(1, "raise_expert@12").ok());
  REQUIRE(s.ranks()->inject_fault(0, "raise_expert@31").ok());
  s.start();
  auto got = serve_all(s, js);
  check_same(got, want, js);
  s.stop();
  CHECK(s.ranks()->shard_restarts() == 2);
  CHECK(s.preemptions() == 0); // none recomputed from scratch
  // The supervisor's restarted shards serve the next requests too, the
  // prompts now from the ranks' prefix caches.
  s.start();
  CHECK(s.shards_up());
  check_same(serve_all(s, js), want, js);
  CHECK(s.metrics().gauges().prefix_cache_hit_tokens > 0);
  CHECK(s.metrics().gauges().expert_shard_restarts == 2);
}
