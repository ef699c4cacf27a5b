// sample_token ranks only the tokens it needs: its choices and reported
// alternatives equal those of a full stable sort of the vocabulary (ties
// to the lower id), greedy, with log-probabilities, and when sampling.

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>

#include "tutti/serve/sampler.hpp"

using namespace tutti::serve;

namespace {

// Logits with many ties (a few distinct values, -0.0 among them).
std::vector<float> tied_logits(int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  const float values[] = {-1.5f, -0.0f, 0.0f, 0.25f, 2.0f, 2.0f, 3.5f};
  std::vector<float> out(vocab);
  for (auto& v : out)
    v = values[gen() % 7];
  return out;
}

std::vector<int32_t> fully_ranked(const std::vector<float>& logits) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b];
  });
  return order;
}

} // namespace

TEST_CASE("greedy takes the lowest id of the best logit", "[unit]") {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto lg = tied_logits(257, seed);
    sampling_params p;
    p.temperature = 0.0;
    CHECK(sample_token(lg.data(), 257, p, 0).token == fully_ranked(lg)[0]);
  }
}

TEST_CASE("the reported alternatives are the full ranking's first ones",
          "[unit]") {
  const auto lg = tied_logits(100, 7);
  const auto order = fully_ranked(lg);
  for (int64_t n : {0, 1, 5, 20, 100, 150}) {
    sampling_params p;
    p.temperature = 0.0;
    p.logprobs = n;
    const auto t = sample_token(lg.data(), 100, p, 0);
    REQUIRE(static_cast<int64_t>(t.top.size()) == std::min<int64_t>(n, 100));
    for (size_t i = 0; i < t.top.size(); ++i)
      CHECK(t.top[i].first == order[i]);
  }
}

TEST_CASE("sampling draws from the full ranking's candidates", "[unit]") {
  const auto lg = tied_logits(64, 3);
  const auto order = fully_ranked(lg);
  for (int64_t top_k : {0, 1, 3, 10}) {
    sampling_params p;
    p.temperature = 0.8;
    p.top_k = top_k;
    p.top_p = 0.9;
    p.seed = 11;
    for (int64_t i = 0; i < 50; ++i) {
      const auto t = sample_token(lg.data(), 64, p, i);
      const int64_t keep = top_k > 0 ? top_k : 64;
      CHECK(std::find(order.begin(), order.begin() + keep, t.token)
            != order.begin() + keep);
      if (top_k == 1)
        CHECK(t.token == order[0]);
    }
  }
}
