#pragma once
// One sequence continued token by token on the serving forward (engine.hpp)
// with a KV cache of its own: what `tutti sample` runs, and the same
// tokens `tutti serve` gives the same prompt and sampling parameters.

#include <cstdint>
#include <functional>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/serve/model.hpp"
#include "tutti/serve/sampler.hpp"

namespace tutti::serve {

struct continuation_options {
  int64_t max_new_tokens = 64;
  sampling_params sampling; // temperature 0: greedy
  int32_t stop_id = -1;     // stop after this token; -1 none
};

struct continuation {
  std::vector<int32_t> tokens; // the new ones
  // Whether it stopped at the model's max_position_embeddings.
  bool at_max_positions = false;
};

// The new tokens after `prompt` (its last max_position_embeddings - 1
// tokens, so at least one new one fits); on_token sees each as it comes.
// Refuses an empty prompt or a token outside the vocabulary.
expected<continuation> continue_sequence(
  const served_model& model, std::vector<int32_t> prompt,
  const continuation_options& options,
  const std::function<void(int32_t)>& on_token = {});

} // namespace tutti::serve
