#pragma once
// Continuing a prompt token by token: greedy (temperature 0) or sampled
// from softmax(logits / temperature) over the top_k most likely tokens,
// with a seeded generator so a continuation can be repeated.

#include <cstdint>
#include <functional>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/generate/checkpoint_model.hpp"

namespace tutti::generate {

struct sampling_options {
  std::int64_t max_new_tokens = 64;
  double temperature = 0; // 0: greedy
  std::int64_t top_k = 0; // 0: the whole vocabulary
  std::uint64_t seed = 0;
  std::int32_t stop_id = -1; // end-of-document: stop after it; -1 none
};

// Index of the token sampled from logits.
std::int32_t pick_token(const std::vector<float>& logits,
                        const sampling_options& options, std::uint64_t draw);

// The new tokens after `prompt`; on_token is called with each as it comes.
expected<std::vector<std::int32_t>> continue_text(
  const checkpoint_model& model, std::vector<std::int32_t> prompt,
  const sampling_options& options,
  const std::function<void(std::int32_t)>& on_token = {});

} // namespace tutti::generate
