#pragma once
// The model's tensors by their Hugging Face names (MixtralForCausalLM's,
// Qwen3-MoE's q_norm and k_norm, DeepSeek-V3's dense MLP and shared experts,
// whose naming follows Mixtral's): the one place those names are spelled;
// family.hpp translates them to another family's. Training's parameter buffer
// (param_layout.hpp), the loader (weights.hpp), serving's layout of the weights
// and the exports all name tensors through these.

#include <cstdint>
#include <string>

namespace tutti::model::names {

inline constexpr const char* embed = "model.embed_tokens.weight";
inline constexpr const char* final_norm = "model.norm.weight";
inline constexpr const char* lm_head = "lm_head.weight";

// A decoder layer's tensors, after its prefix (layer()).
inline constexpr const char* input_norm = "input_layernorm.weight";
inline constexpr const char* q_proj = "self_attn.q_proj.weight";
inline constexpr const char* k_proj = "self_attn.k_proj.weight";
inline constexpr const char* v_proj = "self_attn.v_proj.weight";
inline constexpr const char* o_proj = "self_attn.o_proj.weight";
// Qwen3-MoE's RMSNorm weights of a query and a key head ([head_dim]).
inline constexpr const char* q_norm = "self_attn.q_norm.weight";
inline constexpr const char* k_norm = "self_attn.k_norm.weight";
// Multi-head latent attention's (DeepSeek-V3's names): the query through a
// low-rank latent (q_a_proj, its RMSNorm, q_b_proj; without one, q_proj),
// the key/value latent and the shared rotated key (kv_a_proj_with_mqa), the
// latent's RMSNorm and its per-head keys and values (kv_b_proj).
inline constexpr const char* q_a_proj = "self_attn.q_a_proj.weight";
inline constexpr const char* q_a_norm = "self_attn.q_a_layernorm.weight";
inline constexpr const char* q_b_proj = "self_attn.q_b_proj.weight";
inline constexpr const char* kv_a_proj = "self_attn.kv_a_proj_with_mqa.weight";
inline constexpr const char* kv_a_norm = "self_attn.kv_a_layernorm.weight";
inline constexpr const char* kv_b_proj = "self_attn.kv_b_proj.weight";
inline constexpr const char* post_norm = "post_attention_layernorm.weight";
inline constexpr const char* router = "block_sparse_moe.gate.weight";
// The router's selection-only biases, under DeepSeek-V3's name.
inline constexpr const char* router_bias =
  "block_sparse_moe.gate.e_score_correction_bias";

// A leading dense layer's SwiGLU MLP (moe_config.first_k_dense_replace), in
// place of router and experts: [F, D], [F, D], [D, F].
inline constexpr const char* dense_gate = "mlp.gate_proj.weight";
inline constexpr const char* dense_up = "mlp.up_proj.weight";
inline constexpr const char* dense_down = "mlp.down_proj.weight";
// The shared experts of a MoE layer, one SwiGLU MLP applied to every token
// (moe_config.n_shared_experts), named as the routed experts' w1, w3, w2.
inline constexpr const char* shared_w1 =
  "block_sparse_moe.shared_experts.w1.weight";
inline constexpr const char* shared_w3 =
  "block_sparse_moe.shared_experts.w3.weight";
inline constexpr const char* shared_w2 =
  "block_sparse_moe.shared_experts.w2.weight";

// "model.layers.L." + what
inline std::string layer(int64_t l, const char* what) {
  return "model.layers." + std::to_string(l) + "." + what;
}

// One expert's w1, w3 or w2 (`which`): "model.layers.L.block_sparse_moe.
// experts.E.w1.weight".
inline std::string expert(int64_t l, int64_t e, const char* which) {
  return layer(l, "block_sparse_moe.experts.") + std::to_string(e) + "." + which
         + ".weight";
}

// A block of a layer's experts in training's buffers and checkpoints
// ([count, out, in], one row per expert the rank holds): "model.layers.L.
// block_sparse_moe.experts.w1".
inline std::string expert_block(int64_t l, const char* which) {
  return layer(l, "block_sparse_moe.experts.") + which;
}

} // namespace tutti::model::names
