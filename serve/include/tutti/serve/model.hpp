#pragma once
// A model held for serving (Mixtral or Qwen3-MoE, with DeepSeek-V3's shared
// experts and leading dense layers as options): its shape and its weights in
// host memory, laid out for the serving forward (engine.hpp). Loaded from a
// `tutti export` / Hugging Face directory (config.json and F32, F16 or BF16
// safetensors, one file or shards listed in model.safetensors.index.json) or
// straight from a tutti checkpoint directory (MANIFEST and shard files).

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/enums.hpp"
#include "tutti/model/model_shape.hpp"
#include "tutti/model/weights.hpp"
#include "tutti/kernels/packed_gemm.hpp"

namespace tutti::tokenizer {
class tokenizer;
}

namespace tutti::serve {

// The one shape type (model/model_shape.hpp).
using model::model_shape;

// One decoder layer. Matrices are row-major [out, in] as in Hugging Face;
// the experts of a layer are stacked: w1, w3 [experts, intermediate,
// hidden], w2 [experts, hidden, intermediate].
struct layer_weights {
  std::vector<float> input_norm, q, k, v, o, post_norm;
  std::vector<float> q_norm, k_norm; // [head_dim], with QK-norm; else empty
  // Multi-head latent attention (model_shape::mla; q, k, v then empty but
  // for q, q_proj without q_lora_rank): q_a_proj, q_a_layernorm, q_b_proj,
  // kv_a_proj_with_mqa, kv_a_layernorm and kv_b_proj, as Hugging Face's.
  std::vector<float> q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b;
  // kv_b_proj's key half per head transposed, [heads, kv_lora_rank,
  // qk_nope_head_dim]: a query head's unrotated part into the latent
  // (absorbed decode, engine.cpp).
  std::vector<float> kv_b_key_t;
  std::vector<float> router, router_bias; // [experts, hidden], [experts]
  // Float experts; with scales ([experts, out] each), int8 codes as
  // floats. Emptied once int8 experts are packed (only the packed copy
  // serves them).
  std::vector<float> w1, w3, w2;
  std::vector<float> w1_scale, w3_scale, w2_scale;
  // The SwiGLU MLP on every token (DeepSeek-V3's): a leading dense layer's,
  // which has no router and no experts, or the shared experts'; empty
  // without. [F, hidden], [F, hidden], [hidden, F]; packed as the experts.
  std::vector<float> mlp_w1, mlp_w3, mlp_w2;
  kernels::packed_matrix mlp_w13_t, mlp_w2_t;
  // The same matrices packed for the serving forward (packed_gemm.hpp);
  // per expert, w1 and w3 side by side: [hidden, 2 * intermediate].
  kernels::packed_matrix q_t, k_t, v_t, o_t, router_t;
  kernels::packed_matrix q_a_t, q_b_t, kv_a_t; // MLA
  std::vector<kernels::packed_matrix> w13_t, w2_t;
};

struct served_model {
  std::string name; // what /v1/models lists
  // The tokenizer shipped with the model (its directory's tokenizer.model);
  // null: byte-level text.
  std::shared_ptr<const tokenizer::tokenizer> text_tokenizer;
  // From tokenizer_config.json beside the weights (empty without one): the
  // Jinja chat template and the special tokens' text it is rendered with.
  std::string chat_template, bos_token, eos_token;
  model_shape shape;
  std::vector<float> embed, final_norm, lm_head;
  kernels::packed_matrix lm_head_t;
  std::vector<layer_weights> layers;
  // The experts' weights: fp32, or int8 (from an int8 checkpoint, or
  // quantized at load by quantize_experts).
  weight_dtype expert_dtype = weight_dtype::fp32;
  bool quantized_at_load = false;
  // int8 experts multiplying int8 rows (serve.activation_dtype: int8,
  // use_int8_rows): experts loaded later are repacked so too.
  bool int8_rows = false;
  // The experts whose weights this process holds, [layer * experts + e]:
  // a daemon of a replica across daemons holds its ranks' own
  // (expert_loading.hpp), the others' packed matrices stay empty. Empty:
  // every expert.
  std::vector<char> held_experts;
  // A DeepSeek-V3 directory's multi-token-prediction tensors, left unread
  // (model_shape::mtp_layers): the serve start says how many.
  int64_t skipped_mtp_tensors = 0;
  bool holds_expert(int64_t layer, int64_t expert) const {
    return held_experts.empty()
           || held_experts[layer * shape.experts + expert] != 0;
  }
};

// Fills in the packed matrices from the row-major ones (model_from_tensors
// does).
void pack_for_serving(served_model& m);

// serve.weight_dtype int8 or bf16 on a model with float experts: int8
// quantizes each expert matrix per output channel
// (kernels::quantize_matrix_int8) and packs it int8; bf16 packs it rounded
// to bfloat16 (kernels::pack_matrix_bf16). Either drops the float copies.
// Experts that are int8 already, and `to` fp32, leave the model as it is.
void quantize_experts(served_model& m, weight_dtype to);

// serve.activation_dtype int8: every int8 expert held repacked to
// multiply int8 rows (kernels::with_int8_rows). An error naming the key
// when the experts are not int8.
status use_int8_rows(served_model& m);

// One line for the serve start and /metrics: the experts' dtype, the
// kernel that multiplies them and why, and what the CPU has ("experts
// int8 (quantized at load), kernel avx512 (the CPU has avx512f and fma);
// CPU: avx2 fma avx512f ..., no amx").
std::string expert_weights_text(const served_model& m);
// The same in a word, for /metrics: "int8_avx512", "bf16_avx512_bf16",
// "int8_portable" or "packed_fp32".
std::string expert_kernel_name(const served_model& m);

// Builds a model from tensors under tutti's names (tensor_names.hpp:
// MixtralForCausalLM's, q_norm and k_norm with QK-norm;
// `...block_sparse_moe.gate.e_score_correction_bias` optional: zeros).
// With `...experts.E.wN.weight_scale` ([out, 1] or [out]) beside every
// expert matrix, the matrices are int8 codes and are packed as they are.
// Errors name a tensor as the family's checkpoints do (family.hpp).
// `source` names where they came from in error messages.
expected<served_model> model_from_tensors(
  const model_shape& shape, std::map<std::string, std::vector<float>> tensors,
  const std::map<std::string, std::vector<int64_t>>& shapes,
  const std::string& source);
// The same from weights the model loader read (model/weights.hpp).
expected<served_model> model_from_weights(model::model_weights weights,
                                          const std::string& source);

// A directory with config.json (a `tutti export` or Hugging Face Mixtral
// or Qwen3-MoE directory) or with a MANIFEST (a tutti checkpoint), and the
// tokenizer.model and tokenizer_config.json (chat template) beside the
// weights if there are. Errors are one line
// naming the file, key or tensor.
expected<served_model> load_model(const std::filesystem::path& dir);

} // namespace tutti::serve
