#pragma once
// Choosing the next token from one row of logits. A pure function of the
// logits, the parameters and the token's index in the output: a seeded
// request draws its i-th token from a counter-based generator keyed by
// (seed, i), so it samples the same tokens alone, in any batch, and after
// being preempted and recomputed.

#include <cstdint>
#include <utility>
#include <vector>

namespace tutti::serve {

struct sampling_params {
  double temperature = 1.0; // 0: greedy
  double top_p = 1.0;       // (0, 1]
  int64_t top_k = 0;        // 0: every token
  uint64_t seed = 0;
  int64_t logprobs = -1; // top alternatives to report; -1: none
};

struct sampled_token {
  int32_t token = 0;
  // log-softmax of the raw logits (temperature 1), as OpenAI reports them.
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top; // best first
};

sampled_token sample_token(const float* logits, int64_t vocab,
                           const sampling_params& p, int64_t index);

// log-softmax of one row, in double.
std::vector<double> log_softmax(const float* logits, int64_t vocab);

} // namespace tutti::serve
