#include "tutti/model/model_shape.hpp"

#include <cstdlib>
#include <string>
#include <utility>

namespace tutti::model {

model_shape shape_of(const model_config& m, const moe_config& e) {
  model_shape s;
  s.family = m.family;
  s.vocab = m.vocab_size;
  s.hidden = m.hidden_size;
  s.intermediate = m.intermediate_size;
  s.layers = m.num_hidden_layers;
  s.q_heads = m.num_attention_heads;
  s.kv_heads = m.num_key_value_heads;
  s.head_dim = m.num_attention_heads > 0 ? m.head_dim() : 0;
  s.experts = e.num_experts;
  s.top_k = e.router_top_k;
  s.max_positions = m.max_seq_len;
  s.rope_theta = m.rope_theta;
  s.rms_norm_eps = m.rms_norm_eps;
  s.router_temperature = e.router_temperature;
  s.qk_norm = m.qk_norm();
  s.norm_topk_prob = e.norm_topk_prob;
  s.scoring = e.scoring;
  s.n_group = e.n_group;
  s.topk_group = e.topk_group;
  s.routed_scaling_factor = e.routed_scaling_factor;
  s.q_lora_rank = m.q_lora_rank;
  s.kv_lora_rank = m.kv_lora_rank;
  s.qk_nope_head_dim = m.qk_nope_head_dim;
  s.qk_rope_head_dim = m.qk_rope_head_dim;
  s.v_head_dim = m.v_head_dim;
  s.rope_interleave = m.rope_interleave;
  s.shared_experts = e.n_shared_experts;
  s.dense_layers = e.first_k_dense_replace;
  s.dense_intermediate = m.dense_intermediate_size;
  return s;
}

model_shape shape_of(const store::shard_meta& rank0) {
  auto i = [&](const char* k) {
    return rank0.ints.count(k) ? rank0.ints.at(k) : 0;
  };
  // Kept as text in the header, exactly as configured.
  auto d = [&](const char* k, double fallback) {
    return rank0.strings.count(k) ? std::atof(rank0.strings.at(k).c_str())
                                  : fallback;
  };
  model_shape s;
  s.vocab = i("vocab_size");
  s.hidden = i("hidden_size");
  s.intermediate = i("intermediate_size");
  s.layers = i("num_hidden_layers");
  s.q_heads = i("num_attention_heads");
  s.kv_heads = i("num_key_value_heads");
  s.head_dim = s.q_heads > 0 ? s.hidden / s.q_heads : 0;
  if (rank0.ints.count("head_dim"))
    s.head_dim = rank0.ints.at("head_dim");
  if (rank0.strings.count("model_family")) {
    // An unknown name stays out of range: check_shape refuses it.
    const auto f = from_string<model_family>(rank0.strings.at("model_family"));
    s.family = f ? *f : static_cast<model_family>(-1);
  }
  s.qk_norm = s.family == model_family::qwen3_moe;
  if (rank0.ints.count("norm_topk_prob"))
    s.norm_topk_prob = rank0.ints.at("norm_topk_prob") != 0;
  s.experts = i("num_experts");
  s.top_k = i("router_top_k");
  s.max_positions = i("max_seq_len");
  s.rope_theta = d("rope_theta", 10000.0);
  s.rms_norm_eps = d("rms_norm_eps", 1e-5);
  s.router_temperature = d("router_temperature", 1.0);
  if (rank0.strings.count("scoring_func")) {
    // An unknown name stays out of range: check_shape refuses it.
    const auto f = from_string<scoring_func>(rank0.strings.at("scoring_func"));
    s.scoring = f ? *f : static_cast<scoring_func>(-1);
  }
  if (rank0.ints.count("n_group"))
    s.n_group = rank0.ints.at("n_group");
  if (rank0.ints.count("topk_group"))
    s.topk_group = rank0.ints.at("topk_group");
  s.routed_scaling_factor = d("routed_scaling_factor", 1.0);
  // Absent: grouped-query attention.
  s.q_lora_rank = i("q_lora_rank");
  s.kv_lora_rank = i("kv_lora_rank");
  s.qk_nope_head_dim = i("qk_nope_head_dim");
  s.qk_rope_head_dim = i("qk_rope_head_dim");
  s.v_head_dim = i("v_head_dim");
  s.rope_interleave = i("rope_interleave") != 0;
  // Absent from a header written before them: none.
  s.shared_experts = i("n_shared_experts");
  s.dense_layers = i("first_k_dense_replace");
  s.dense_intermediate = i("dense_intermediate_size");
  return s;
}

status check_family(const store::shard_meta& rank0, model_family want,
                    const std::string& dir) {
  const auto has = shape_of(rank0).family;
  if (has == want)
    return {};
  return status::error(std::string("model.family: the checkpoint in ") + dir
                       + " has " + to_string(has) + ", the config "
                       + to_string(want));
}

void record_shape(const model_config& m, const moe_config& e,
                  std::map<std::string, int64_t>& ints,
                  std::map<std::string, std::string>& strings) {
  ints["vocab_size"] = m.vocab_size;
  ints["hidden_size"] = m.hidden_size;
  ints["intermediate_size"] = m.intermediate_size;
  ints["num_hidden_layers"] = m.num_hidden_layers;
  ints["num_attention_heads"] = m.num_attention_heads;
  ints["num_key_value_heads"] = m.num_key_value_heads;
  ints["head_dim"] = m.head_dim();
  ints["max_seq_len"] = m.max_seq_len;
  ints["num_experts"] = e.num_experts;
  ints["router_top_k"] = e.router_top_k;
  ints["norm_topk_prob"] = e.norm_topk_prob ? 1 : 0;
  strings["model_family"] = to_string(m.family);
  strings["rope_theta"] = std::to_string(m.rope_theta);
  strings["rms_norm_eps"] = std::to_string(m.rms_norm_eps);
  strings["router_temperature"] = std::to_string(e.router_temperature);
  ints["n_group"] = e.n_group;
  ints["topk_group"] = e.topk_group;
  strings["scoring_func"] = to_string(e.scoring);
  strings["routed_scaling_factor"] = std::to_string(e.routed_scaling_factor);
  if (m.mla()) {
    ints["q_lora_rank"] = m.q_lora_rank;
    ints["kv_lora_rank"] = m.kv_lora_rank;
    ints["qk_nope_head_dim"] = m.qk_nope_head_dim;
    ints["qk_rope_head_dim"] = m.qk_rope_head_dim;
    ints["v_head_dim"] = m.v_head_dim;
    ints["rope_interleave"] = m.rope_interleave ? 1 : 0;
  }
  ints["n_shared_experts"] = e.n_shared_experts;
  ints["first_k_dense_replace"] = e.first_k_dense_replace;
  ints["dense_intermediate_size"] = m.dense_intermediate_size;
}

namespace {

// DeepSeek-V3's router fields, by their Hugging Face names.
status check_router_groups(const model_shape& s, const char* experts) {
  if (s.scoring != scoring_func::softmax && s.scoring != scoring_func::sigmoid)
    return status::error("scoring_func: must be softmax or sigmoid");
  const bool sigmoid = s.scoring == scoring_func::sigmoid;
  if (s.n_group < 1 || s.experts % s.n_group != 0)
    return status::error(std::string("n_group must divide ") + experts + " ("
                         + std::to_string(s.experts) + " % "
                         + std::to_string(s.n_group) + " != 0)");
  if (s.topk_group < 1 || s.topk_group > s.n_group)
    return status::error("topk_group must be between 1 and n_group");
  if (s.top_k > s.topk_group * (s.experts / s.n_group))
    return status::error(
      "num_experts_per_tok must be <= topk_group * experts per group");
  if (!sigmoid && (s.n_group != 1 || s.routed_scaling_factor != 1.0))
    return status::error(
      "n_group > 1 and routed_scaling_factor != 1 need scoring_func sigmoid");
  if (!(s.routed_scaling_factor > 0.0))
    return status::error("routed_scaling_factor must be positive");
  return {};
}

// Multi-head latent attention's sizes, by their Hugging Face names.
status check_mla(const model_shape& s) {
  if (!s.mla()) {
    if (s.q_lora_rank != 0 || s.qk_nope_head_dim != 0 || s.qk_rope_head_dim != 0
        || s.v_head_dim != 0)
      return status::error("kv_lora_rank must be positive with q_lora_rank, "
                           "qk_nope_head_dim, qk_rope_head_dim or v_head_dim");
    return {};
  }
  if (s.q_lora_rank < 0)
    return status::error("q_lora_rank must be 0 or positive");
  if (s.qk_nope_head_dim <= 0)
    return status::error("qk_nope_head_dim must be positive");
  if (s.qk_rope_head_dim <= 0 || s.qk_rope_head_dim % 2 != 0)
    return status::error(
      "qk_rope_head_dim must be even and positive (rotary embedding)");
  if (s.v_head_dim <= 0 || s.v_head_dim > s.qk_head_dim())
    return status::error(
      "v_head_dim must be positive and <= qk_nope_head_dim + "
      "qk_rope_head_dim");
  if (s.kv_heads != s.q_heads)
    return status::error(
      "num_key_value_heads must equal num_attention_heads with kv_lora_rank");
  if (s.qk_norm)
    return status::error("kv_lora_rank must be 0 with QK-norm");
  return {};
}

// DeepSeek-V3's shared experts and dense layers, by their Hugging Face names.
status check_feed_forward(const model_shape& s) {
  if (s.shared_experts < 0)
    return status::error("n_shared_experts must be >= 0");
  if (s.dense_layers < 0 || s.dense_layers >= s.layers)
    return status::error(
      "first_k_dense_replace must be >= 0 and < num_hidden_layers");
  if (s.dense_layers > 0 && s.dense_intermediate <= 0)
    return status::error(
      "intermediate_size (the dense layers' width) must be positive");
  return {};
}

} // namespace

status check_shape(const model_shape& s) {
  if (s.family != model_family::mixtral && s.family != model_family::qwen3_moe
      && s.family != model_family::deepseek_v3)
    return status::error(
      "model_type: only mixtral, qwen3_moe and deepseek_v3 are supported");
  // Qwen3-MoE's and DeepSeek-V3's config.json name two of them differently.
  const bool qwen3 = s.family == model_family::qwen3_moe;
  const bool deepseek = s.family == model_family::deepseek_v3;
  const char* experts = qwen3      ? "num_experts"
                        : deepseek ? "n_routed_experts"
                                   : "num_local_experts";
  if (deepseek && !s.mla())
    return status::error("kv_lora_rank must be positive for deepseek_v3");
  const std::pair<const char*, int64_t> sizes[] = {
    {"vocab_size", s.vocab},
    {"hidden_size", s.hidden},
    {qwen3 || deepseek ? "moe_intermediate_size" : "intermediate_size",
     s.intermediate},
    {"num_hidden_layers", s.layers},
    {"num_attention_heads", s.q_heads},
    {"num_key_value_heads", s.kv_heads},
    {"head_dim", s.head_dim},
    {experts, s.experts},
    {"num_experts_per_tok", s.top_k},
    {"max_position_embeddings", s.max_positions}};
  for (const auto& [key, v] : sizes)
    if (v <= 0)
      return status::error(std::string(key) + " must be positive");
  if (s.q_heads % s.kv_heads != 0)
    return status::error(
      "num_attention_heads must be a multiple of num_key_value_heads");
  if (!s.mla() && s.head_dim % 2 != 0)
    return status::error("head_dim must be even (rotary embedding)");
  if (s.top_k > s.experts)
    return status::error(std::string("num_experts_per_tok must be <= ")
                         + experts);
  TUTTI_RETURN_IF_ERROR(check_router_groups(s, experts));
  TUTTI_RETURN_IF_ERROR(check_mla(s));
  return check_feed_forward(s);
}

} // namespace tutti::model
