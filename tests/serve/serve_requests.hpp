#pragma once
// Shared by the serving tests (expert parallelism, placement): a small 8-expert model, a set of
// greedy and seeded requests, serving them all at once on a service, and
// comparing two runs' tokens and log-probabilities bit for bit.

#include <chrono>
#include <functional>
#include <random>

#include "serve_test_support.hpp"
#include "tutti/config/serve_config.hpp"
#include "tutti/serve/service.hpp"

namespace tutti::testing {

inline serve::served_model eight_expert_model() {
  // 8 experts top-2 over 2 layers: 2 ranks hold 4 each, 4 ranks 2 each.
  return random_served_model(
    "serve_placement_model", serve_test_config(64, 32, 48, 2, 4, 2, 8, 2, 96),
    41);
}

// The same as a Qwen3-MoE: QK-norm, heads of 12 (4 * 12 != 32), gates
// without renormalisation.
inline serve::served_model eight_expert_qwen3_model() {
  return random_served_model(
    "serve_qwen3_model",
    qwen3_test_config(64, 32, 48, 2, 4, 2, 12, 8, 2, 96, false), 41);
}

// The Mixtral model with DeepSeek-V3's feed-forward side, over 3 layers:
// the first a dense SwiGLU MLP (width 40), the others with a shared expert.
inline serve::served_model eight_expert_feed_forward_model() {
  auto cfg = serve_test_config(64, 32, 48, 3, 4, 2, 8, 2, 96);
  cfg.moe.n_shared_experts = 1;
  cfg.moe.first_k_dense_replace = 1;
  cfg.model.dense_intermediate_size = 40;
  return random_served_model("serve_feed_forward_model", cfg, 41);
}

struct served_outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  serve::finish_reason finish = serve::finish_reason::none;
  std::string error;
};

struct served_job {
  std::vector<int32_t> prompt;
  int64_t max_tokens;
  serve::sampling_params sampling;
};

// Odd requests greedy, even ones sampled with their own seed.
inline std::vector<served_job> served_jobs(int n) {
  std::vector<served_job> out;
  std::mt19937 rng(5);
  for (int i = 0; i < n; ++i) {
    served_job j;
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

inline serve::service_limits ep_limits(int64_t ranks) {
  serve::service_limits l;
  l.ep_ranks = ranks;
  l.batch = {40, 16}; // forces chunked prefill
  l.max_queue = 64;
  l.kv_cache_bytes = 4 << 20;
  l.step_timeout_s = 20;
  return l;
}

// A service of `model` (eight_expert_model) under `l`, started.
inline std::unique_ptr<serve::service> start_service(
  const serve::service_limits& l,
  serve::served_model model = eight_expert_model()) {
  auto svc = serve::service::create(std::move(model), l);
  REQUIRE(svc.ok());
  auto s = std::move(svc.value());
  s->start();
  return s;
}

// What parsing the serve section "model: m" + `keys` says: "" when it
// parses, else its one-line refusal.
inline std::string serve_refusal(const std::string& keys) {
  auto c = serve::parse_serve_config("serve:\n  model: m\n" + keys, "test");
  return c.ok() ? std::string() : c.message();
}

// Submits every job at once and collects every stream (2 minutes at most);
// `during(tokens so far)`, if given, runs between events.
inline std::vector<served_outcome> serve_all_jobs(
  serve::service& svc, const std::vector<served_job>& js,
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
  std::vector<served_outcome> out(js.size());
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

inline void check_same_outcomes(const std::vector<served_outcome>& got,
                                const std::vector<served_outcome>& want,
                                const std::vector<served_job>& js) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("request " << i << ": " << got[i].error);
    CHECK(got[i].finish == serve::finish_reason::length);
    CHECK(static_cast<int64_t>(got[i].tokens.size()) == js[i].max_tokens);
    CHECK(got[i].tokens == want[i].tokens);
    CHECK(got[i].logprobs == want[i].logprobs);
  }
}

} // namespace tutti::testing
