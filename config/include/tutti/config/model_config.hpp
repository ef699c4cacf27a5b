#pragma once
// The model's sections of the job spec: the transformer's shape
// (model_config) and its mixture of experts (moe_config), each with the
// visit_fields overload that declares its keys (see job_config.hpp).

#include <cstdint>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/config/enums.hpp"
#include "tutti/config/field.hpp"

namespace tutti {

struct model_config {
  model_family family = model_family::mixtral;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  double rope_theta = 10000.0;
  int64_t max_seq_len = 0;
  double rms_norm_eps = 1e-5;
  double init_std = 0.02;
  int64_t head_dim_size = 0; // key head_dim; 0 = hidden / heads
  // Multi-head latent attention (DeepSeek-V3), on when kv_lora_rank > 0.
  int64_t q_lora_rank = 0; // 0 = one q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleave = false;
  // The dense SwiGLU MLP's width in the leading dense layers
  // (moe_config.first_k_dense_replace); 0 without them.
  int64_t dense_intermediate_size = 0;

  int64_t head_dim() const {
    return head_dim_size > 0 ? head_dim_size
                             : hidden_size / num_attention_heads;
  }
  // Qwen3-MoE's RMSNorm of each query and key head before the rotary
  // embedding (q_norm, k_norm).
  bool qk_norm() const { return family == model_family::qwen3_moe; }
  bool mla() const { return kv_lora_rank > 0; }
  // MLA's query and key head: its unrotated and rotated parts.
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

template <class Visitor>
void visit_fields(Visitor& v, model_config& c) {
  using namespace config;
  v.field("family", c.family,
          "architecture, by Hugging Face's model_type: mixtral, "
          "qwen3_moe (RMSNorm of each query and key head, q_norm and "
          "k_norm, before the rotary embedding) or deepseek_v3 (multi-head "
          "latent attention, needs kv_lora_rank; its tensor and config.json "
          "names)");
  v.field("vocab_size", c.vocab_size, "tokens in the vocabulary", required,
          at_least(2));
  v.field("hidden_size", c.hidden_size,
          "model width; without head_dim a multiple of "
          "num_attention_heads, even per head",
          required, at_least(1));
  v.field("intermediate_size", c.intermediate_size,
          "expert FFN width (Hugging Face's moe_intermediate_size for "
          "qwen3_moe and deepseek_v3)",
          required, at_least(1));
  v.field("dense_intermediate_size", c.dense_intermediate_size,
          "the dense SwiGLU MLP's width in the first "
          "moe_config.first_k_dense_replace layers (Hugging Face's "
          "intermediate_size for qwen3_moe and deepseek_v3); needed with them",
          at_least(0, "0 = no dense layers"));
  v.field("num_hidden_layers", c.num_hidden_layers, "transformer layers",
          required, at_least(1));
  v.field("num_attention_heads", c.num_attention_heads,
          "query heads; a multiple of num_key_value_heads", required,
          at_least(1));
  v.field("num_key_value_heads", c.num_key_value_heads,
          "key/value heads (grouped-query attention)", required, at_least(1));
  v.field("rope_theta", c.rope_theta, "rotary embedding base", above(0));
  v.field("max_seq_len", c.max_seq_len, "longest sequence", required,
          at_least(1));
  v.field("rms_norm_eps", c.rms_norm_eps, "RMSNorm epsilon", above(0));
  v.field("init_std", c.init_std, "standard deviation of initial weights",
          above(0));
  v.field("head_dim", c.head_dim_size,
          "size of an attention head; num_attention_heads * head_dim may "
          "differ from hidden_size (Qwen3-MoE)",
          at_least(0, "0 = hidden_size / num_attention_heads"));
  v.field("kv_lora_rank", c.kv_lora_rank,
          "multi-head latent attention (DeepSeek-V3's MLA): keys and values "
          "from one RMSNormed latent of this width per token "
          "(kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj), which serving "
          "caches instead of per-head keys and values; needs "
          "num_key_value_heads = num_attention_heads and no QK-norm",
          at_least(0, "0 = grouped-query attention"));
  v.field("q_lora_rank", c.q_lora_rank,
          "MLA: queries through a low-rank RMSNormed latent of this width "
          "(q_a_proj, q_a_layernorm, q_b_proj)",
          at_least(0, "0 = one q_proj"));
  v.field("qk_nope_head_dim", c.qk_nope_head_dim,
          "MLA: a query and key head's values without the rotary embedding",
          at_least(0));
  v.field("qk_rope_head_dim", c.qk_rope_head_dim,
          "MLA: a query head's rotated values, and the rotated key all heads "
          "share; even",
          at_least(0));
  v.field("v_head_dim", c.v_head_dim,
          "MLA: a value head's size; <= qk_nope_head_dim + qk_rope_head_dim",
          at_least(0));
  v.field("rope_interleave", c.rope_interleave,
          "MLA: the rotated values pair (2i, 2i+1), as DeepSeek-V3's "
          "checkpoints (Hugging Face de-interleaves them before the "
          "rotation); false: pairs (i, i + half)");
}

struct moe_config {
  int64_t num_experts = 0;
  int64_t router_top_k = 0;
  double router_temperature = 1.0;
  bool norm_topk_prob = true;
  // DeepSeek-V3's router (kernels/ops.hpp router_sigmoid_forward).
  scoring_func scoring = scoring_func::softmax;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  // DeepSeek-V3's feed-forward side: a SwiGLU MLP of width
  // intermediate_size * n_shared_experts on every token, added to the routed
  // experts' output; layers [0, first_k_dense_replace) a dense MLP instead
  // of router and experts.
  int64_t n_shared_experts = 0;
  int64_t first_k_dense_replace = 0;
  double capacity_factor = 0.0;
  double aux_loss_coeff = 0.0;
  double z_loss_coeff = 0.0;
  double bias_update_rate = 0.0;
  all_to_all_mode all_to_all_communication = all_to_all_mode::enabled;
  int64_t communication_buffer_size = 0; // bytes; 0 = auto
  int64_t combine_chunks = 2;
  bool share_idle_cores = true; // model/idle_core_pool.hpp
  bool rack_aware_alltoall = false; // moe/rack_exchange.hpp
  dispatch_dtype dispatch = dispatch_dtype::fp32; // moe/token_exchange.hpp
  int64_t routing_stats_window = 100; // steps; 0 = off
  std::string placement;              // plan file; empty = contiguous

  // Layer l has a dense MLP, not router and experts.
  bool dense_layer(int64_t l) const { return l < first_k_dense_replace; }
  // The shared experts' width (one SwiGLU MLP), 0 without them.
  int64_t shared_intermediate(const model_config& m) const {
    return n_shared_experts * m.intermediate_size;
  }
};

template <class Visitor>
void visit_fields(Visitor& v, moe_config& c) {
  using namespace config;
  v.field("num_experts", c.num_experts,
          "experts per MoE layer; divisible by ep_size", required, at_least(1));
  v.field("router_top_k", c.router_top_k,
          "experts each token is routed to; <= num_experts", required,
          at_least(1));
  v.field("router_temperature", c.router_temperature,
          "router softmax temperature", above(0));
  v.field("norm_topk_prob", c.norm_topk_prob,
          "gates renormalised over the chosen experts (Mixtral; the "
          "published Qwen3-MoE models); false: the softmax over all experts "
          "at the chosen ones (model.family qwen3_moe only); with "
          "scoring_func sigmoid, false keeps the raw sigmoid scores");
  v.field("scoring_func", c.scoring,
          "expert scores: softmax over the experts, or each expert's sigmoid "
          "with the bias choosing only and gates from the chosen scores "
          "(DeepSeek-V3)");
  v.field("n_group", c.n_group,
          "expert groups (contiguous ids) for group-limited routing; "
          "divides num_experts; > 1 needs scoring_func sigmoid; with each "
          "group's experts in one rack, a token reaches topk_group racks",
          at_least(1));
  v.field("topk_group", c.topk_group,
          "groups a token may use, ranked by the sum of their two best "
          "biased scores; <= n_group",
          at_least(1));
  v.field("routed_scaling_factor", c.routed_scaling_factor,
          "factor on the routed experts' gates (scoring_func sigmoid)",
          above(0));
  v.field("n_shared_experts", c.n_shared_experts,
          "experts every token goes through besides its routed ones, as one "
          "SwiGLU MLP of width model.intermediate_size * n_shared_experts "
          "added to their output (DeepSeek-V3); replicated like attention",
          at_least(0, "0 = none"));
  v.field("first_k_dense_replace", c.first_k_dense_replace,
          "the first layers, a dense SwiGLU MLP of width "
          "model.dense_intermediate_size each instead of router and experts "
          "(DeepSeek-V3); < model.num_hidden_layers",
          at_least(0, "0 = every layer a MoE layer"));
  v.field("capacity_factor", c.capacity_factor,
          "tokens an expert takes, over the even share",
          at_least(0, "0 = dropless"));
  v.field("aux_loss_coeff", c.aux_loss_coeff, "load-balancing loss weight",
          at_least(0));
  v.field("z_loss_coeff", c.z_loss_coeff, "router z-loss weight", at_least(0));
  v.field("bias_update_rate", c.bias_update_rate,
          "loss-free balancing: expert bias step per update",
          at_least(0, "0 = off"));
  v.field("all_to_all_communication", c.all_to_all_communication,
          "disabled keeps every expert local (needs ep_size 1)");
  v.field("communication_buffer_size", c.communication_buffer_size,
          "all-to-all buffer in bytes, or auto", auto_means_zero,
          with_message(at_least(0), "must be auto or >= 0"));
  v.field("combine_chunks", c.combine_chunks,
          "the combine all-to-all in up to this many chunks of a rank's "
          "experts, each sent while the next computes (over Gloo or NCCL; "
          "an EP group within one process combines in one chunk)",
          at_least(1, "1 = no overlap"));
  v.field("share_idle_cores", c.share_idle_cores,
          "CPU ranks of one node (nproc_per_node > 1) that wait in an "
          "exchange compute tiles of a busier expert shard meanwhile (the "
          "same bits; off: they wait, as ranks on other nodes do)",
          not_fingerprinted);
  v.field("rack_aware_alltoall", c.rack_aware_alltoall,
          "all-to-all through one relay per rack: a token crosses to a "
          "rack once and is fanned out there, its outputs there are summed "
          "at the relay where that is the same bits (top-2: always) and "
          "the backward's two exchanges likewise; same bits as the flat "
          "exchange (the combine in one chunk)",
          not_fingerprinted);
  v.field("dispatch_dtype", c.dispatch,
          "the rows the dispatch all-to-all sends: fp32, or int8 / fp8 "
          "(e4m3) with a float32 scale per row, dequantized at the expert "
          "into float32 (about a quarter of the bytes; in every exchange, "
          "EP 1 included, so the loss does not depend on the EP size); the "
          "combine and the backward's gradients stay fp32; CPU only");
  v.field("routing_stats_window", c.routing_stats_window,
          "steps per window of routing statistics (tokens per expert, "
          "co-activation, layer transitions) kept in the job store for "
          "`tutti experts stats`",
          at_least(0, "0 = off"), not_fingerprinted);
  v.field("placement", c.placement,
          "a plan file from `tutti placement plan`: which rank and slot "
          "holds each expert (empty = contiguous blocks); training applies "
          "it from the start or, changed, at the resume from a checkpoint "
          "(the loss is the same bits); nodes must hold the same plan (its "
          "content is fingerprinted, not the path)",
          not_fingerprinted);
}

} // namespace tutti
