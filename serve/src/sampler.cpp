#include "tutti/serve/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tutti::serve {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from (seed, index).
double uniform(uint64_t seed, int64_t index) {
  const uint64_t bits = splitmix64(splitmix64(seed)
                                   ^ static_cast<uint64_t>(index));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// The n best token ids by logit, best first; ties go to the lower id. A
// decode step asks for one (greedy, no log-probabilities), so no step
// sorts the whole vocabulary unless sampling or the request needs it.
std::vector<int32_t> ranked(const float* logits, int64_t vocab, int64_t n) {
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (n == 1) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i)
      if (better(i, best))
        best = i;
    return {best};
  }
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + n, order.end(), better);
  order.resize(n);
  return order;
}

} // namespace

std::vector<double> log_softmax(const float* logits, int64_t vocab) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i)
    mx = std::max(mx, double(logits[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i)
    sum += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(vocab);
  for (int64_t i = 0; i < vocab; ++i)
    out[i] = double(logits[i]) - lse;
  return out;
}

sampled_token sample_token(const float* logits, int64_t vocab,
                           const sampling_params& p, int64_t index) {
  const auto lp = log_softmax(logits, vocab);
  // Candidates when sampling: the top_k best, then the shortest prefix
  // whose probability (at this temperature) reaches top_p.
  int64_t keep = p.top_k > 0 ? std::min<int64_t>(p.top_k, vocab) : vocab;
  const int64_t shown = std::min<int64_t>(p.logprobs, vocab);
  const auto order = ranked(logits, vocab,
                            std::max(p.temperature <= 0.0 ? 1 : keep, shown));
  sampled_token out;
  if (p.temperature <= 0.0) {
    out.token = order[0];
  } else {
    const double top = double(logits[order[0]]);
    std::vector<double> weight(keep);
    double total = 0.0;
    for (int64_t i = 0; i < keep; ++i) {
      weight[i] = std::exp((double(logits[order[i]]) - top) / p.temperature);
      total += weight[i];
    }
    if (p.top_p < 1.0) {
      double cumulative = 0.0;
      int64_t n = 0;
      while (n < keep) {
        cumulative += weight[n++] / total;
        if (cumulative >= p.top_p)
          break;
      }
      keep = n;
      total = std::accumulate(weight.begin(), weight.begin() + keep, 0.0);
    }
    const double u = uniform(p.seed, index) * total;
    double cumulative = 0.0;
    out.token = order[keep - 1];
    for (int64_t i = 0; i < keep; ++i) {
      cumulative += weight[i];
      if (u < cumulative) {
        out.token = order[i];
        break;
      }
    }
  }
  out.logprob = static_cast<float>(lp[out.token]);
  for (int64_t i = 0; i < shown; ++i)
    out.top.emplace_back(order[i], static_cast<float>(lp[order[i]]));
  return out;
}

} // namespace tutti::serve
