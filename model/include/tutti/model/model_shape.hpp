#pragma once
// The architecture of a model: what every part that builds, loads, serves,
// samples or exports one reads, whatever the model came from (a job config,
// a Hugging Face config.json, a tutti checkpoint's header). Named here by
// role; hf_config.hpp maps the names to Hugging Face's.

#include <cstdint>
#include <map>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/config/model_config.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace tutti::model {

struct model_shape {
  model_family family = model_family::mixtral;
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0; // one expert's FFN width
  int64_t layers = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t max_positions = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  double router_temperature = 1.0;
  // Qwen3-MoE: RMSNorm of each query and key head (q_norm, k_norm).
  bool qk_norm = false;
  // Gates renormalised over the chosen experts; false: the softmax over
  // all experts at the chosen ones.
  bool norm_topk_prob = true;
  // DeepSeek-V3's router: sigmoid scores, group-limited choice, scaled gates.
  scoring_func scoring = scoring_func::softmax;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  // Multi-head latent attention (DeepSeek-V3), on when kv_lora_rank > 0
  // (model_config's keys of the same names).
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleave = false;

  bool mla() const { return kv_lora_rank > 0; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // DeepSeek-V3's feed-forward side: shared experts (one SwiGLU MLP of
  // width intermediate * shared_experts on every token) and the leading
  // dense layers (a SwiGLU MLP of width dense_intermediate).
  int64_t shared_experts = 0;
  int64_t dense_layers = 0;
  int64_t dense_intermediate = 0;

  bool dense_layer(int64_t l) const { return l < dense_layers; }
  int64_t shared_intermediate() const { return shared_experts * intermediate; }
  // DeepSeek-V3's multi-token-prediction modules (num_nextn_predict_layers):
  // layers numbered from `layers` on in a checkpoint, for speculative
  // decoding; tutti serves the main model and skips their tensors.
  int64_t mtp_layers = 0;
};

// The model a job config trains.
model_shape shape_of(const model_config& m, const moe_config& e);

// The model a checkpoint holds, from rank 0's shard header (a header
// without the family is a Mixtral's).
model_shape shape_of(const store::shard_meta& rank0);

// Refuses, naming model.family, a checkpoint (`dir`, its rank-0 header)
// of another family than `want`, the config's: another family's tensors
// may have the same names and sizes.
status check_family(const store::shard_meta& rank0, model_family want,
                    const std::string& dir);

// The header fields shape_of(rank0) reads, from the job config, into a
// shard header's integers and texts: what rank 0's shard records so a
// resume, an export or a server knows the model.
void record_shape(const model_config& m, const moe_config& e,
                  std::map<std::string, int64_t>& ints,
                  std::map<std::string, std::string>& strings);

// The shape's own consistency (positive sizes, heads dividing, even head
// size, top_k <= experts); names the first bad field by its Hugging Face
// name.
status check_shape(const model_shape& s);

} // namespace tutti::model
