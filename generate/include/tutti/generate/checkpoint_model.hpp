#pragma once
// A committed checkpoint's weights, all ranks' shards gathered into one
// model on the CPU, and the forward pass of inference: the logits of the
// next token after a context. It uses the same kernels (kernels/ops.hpp)
// and the same weights as training's forward, without capacity limits (no
// token is dropped when only one sequence runs).

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::generate {

struct model_shape {
  std::int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0;
  std::int64_t num_hidden_layers = 0, num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0, max_seq_len = 0;
  std::int64_t num_experts = 0, router_top_k = 0;
  double rope_theta = 10000, rms_norm_eps = 1e-5, router_temperature = 1;
};

class checkpoint_model {
public:
  // A checkpoint directory (step-NNNNNNNN, with its MANIFEST); every shard
  // is verified before it is used.
  static expected<checkpoint_model> load(const std::filesystem::path& dir);

  const model_shape& shape() const { return shape_; }
  std::int64_t step() const { return step_; }

  // Logits [vocab] of the token after `context` (its last max_seq_len
  // tokens are used). Fails on an empty context or an id outside the
  // vocabulary.
  expected<std::vector<float>> next_logits(
    std::span<const std::int32_t> context) const;

private:
  const std::vector<float>& tensor(const std::string& name) const;

  model_shape shape_;
  std::int64_t step_ = 0;
  std::map<std::string, std::vector<float>> dense_; // Hugging Face names
  std::vector<float> router_bias_;                  // [layers, experts]
  // Per layer, all experts: w1, w3 [E, F, D], w2 [E, D, F].
  std::vector<std::vector<float>> w1_, w3_, w2_;
};

// The newest committed checkpoint under run_dir/checkpoints (a directory
// with a MANIFEST), or a failure saying there is none.
expected<std::filesystem::path> latest_checkpoint(
  const std::filesystem::path& run_dir);

} // namespace tutti::generate
