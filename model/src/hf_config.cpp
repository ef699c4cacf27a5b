#include "tutti/model/hf_config.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include "tutti/model/family.hpp"

namespace tutti::model {

namespace fs = std::filesystem;

namespace {

// norm_topk_prob when config.json gives it; `absent` (the family's
// default) when it does not.
status read_norm_topk_prob(const nlohmann::json& j, model_shape& s,
                           const std::string& file, bool absent) {
  if (!j.contains("norm_topk_prob")) {
    s.norm_topk_prob = absent;
    return {};
  }
  if (!j["norm_topk_prob"].is_boolean())
    return status::error(file + ": key norm_topk_prob must be true or false");
  s.norm_topk_prob = j["norm_topk_prob"].get<bool>();
  return {};
}

// Qwen3-MoE's keys beyond the shared ones, and the variants tutti does not
// build refused in one line naming the key: dense layers between the MoE
// ones, attention biases, tied embeddings, scaled or windowed attention.
status qwen3_keys(const nlohmann::json& j, model_shape& s,
                  const std::string& file) {
  auto refuse = [&](const std::string& key, const std::string& why) {
    return status::error(file + ": key " + key + " " + why);
  };
  // Qwen3MoeConfig's default: false.
  TUTTI_RETURN_IF_ERROR(read_norm_topk_prob(j, s, file, false));
  if (j.contains("decoder_sparse_step")
      && j["decoder_sparse_step"] != nlohmann::json(1))
    return refuse("decoder_sparse_step", "must be 1 (every layer a MoE layer)");
  if (j.contains("mlp_only_layers")
      && !(j["mlp_only_layers"].is_array() && j["mlp_only_layers"].empty()))
    return refuse("mlp_only_layers", "must be empty (every layer a MoE layer)");
  for (const char* flag :
       {"attention_bias", "tie_word_embeddings", "use_sliding_window"})
    if (j.contains(flag) && j[flag] != nlohmann::json(false))
      return refuse(flag, "must be false");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    return refuse("rope_scaling", "must be null (no scaled rotary embedding)");
  if (j.contains("hidden_act") && j["hidden_act"] != nlohmann::json("silu"))
    return refuse("hidden_act", "must be silu");
  return {};
}

// DeepSeek-V3's keys with DeepseekV3Config's defaults where config.json
// leaves one out (as Hugging Face and vLLM read it), before the keys every
// family shares are read.
void deepseek_defaults(const nlohmann::json& j, model_shape& s) {
  const std::pair<const char*, int64_t*> counts[] = {
    {"n_group", &s.n_group},
    {"topk_group", &s.topk_group},
    {"n_shared_experts", &s.shared_experts},
    {"first_k_dense_replace", &s.dense_layers},
    {"q_lora_rank", &s.q_lora_rank},
    {"kv_lora_rank", &s.kv_lora_rank},
    {"qk_nope_head_dim", &s.qk_nope_head_dim},
    {"qk_rope_head_dim", &s.qk_rope_head_dim},
    {"v_head_dim", &s.v_head_dim}};
  const int64_t defaults[] = {8, 4, 1, 3, 1536, 512, 128, 64, 128};
  for (size_t i = 0; i < std::size(counts); ++i)
    if (!j.contains(counts[i].first))
      *counts[i].second = defaults[i];
  if (!j.contains("scoring_func"))
    s.scoring = scoring_func::sigmoid;
  if (!j.contains("routed_scaling_factor"))
    s.routed_scaling_factor = 2.5;
  s.rope_interleave = true; // read below when given
}

// DeepSeek-V3's keys beyond the shared ones, and the variants tutti does
// not build refused in one line naming the key.
status deepseek_keys(const nlohmann::json& j, model_shape& s,
                     const std::string& file) {
  auto refuse = [&](const std::string& key, const std::string& why) {
    return status::error(file + ": key " + key + " " + why);
  };
  // DeepseekV3Config's default: true.
  TUTTI_RETURN_IF_ERROR(read_norm_topk_prob(j, s, file, true));
  if (j.contains("topk_method")
      && j["topk_method"] != nlohmann::json("noaux_tc"))
    return refuse("topk_method", "must be noaux_tc (group-limited, biased "
                                 "choice; DeepSeek-V3's)");
  if (j.contains("moe_layer_freq") && j["moe_layer_freq"] != nlohmann::json(1))
    return refuse("moe_layer_freq", "must be 1 (every layer after the dense "
                                    "ones a MoE layer)");
  for (const char* flag : {"attention_bias", "tie_word_embeddings"})
    if (j.contains(flag) && j[flag] != nlohmann::json(false))
      return refuse(flag, "must be false");
  if (j.contains("hidden_act") && j["hidden_act"] != nlohmann::json("silu"))
    return refuse("hidden_act", "must be silu");
  if (!s.mla())
    return refuse("kv_lora_rank", "must be positive (DeepSeek-V3's multi-head "
                                  "latent attention)");
  return {};
}

// quantization_config of the parsed config.json, as
// read_hf_quantization says.
expected<std::optional<fp8_block_size>> quantization_of(
  const nlohmann::json& j, const std::string& file) {
  if (!j.contains("quantization_config") || j["quantization_config"].is_null())
    return std::optional<fp8_block_size>();
  const auto& q = j["quantization_config"];
  auto refuse = [&](const std::string& field, const std::string& why) {
    return status::error(file + ": quantization_config" + field + " " + why);
  };
  // A value as the message shows it: text bare, an array's items with ", ".
  auto shown = [](const nlohmann::json& v) -> std::string {
    if (v.is_string())
      return v.get<std::string>();
    if (!v.is_array())
      return v.dump();
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i)
      out += (i ? ", " : "") + v[i].dump();
    return out + "]";
  };
  if (!q.is_object())
    return refuse(":", shown(q) + " is not an object");
  if (!q.contains("quant_method"))
    return refuse(".quant_method", "missing (fp8 or compressed-tensors)");
  // `tutti export --dtype int8`'s note: its I8 weights carry their scales.
  if (q["quant_method"] == "compressed-tensors")
    return std::optional<fp8_block_size>();
  if (q["quant_method"] != "fp8")
    return refuse(".quant_method:",
                  shown(q["quant_method"])
                    + " is not supported (fp8, or compressed-tensors as "
                      "tutti's int8 export writes it)");
  for (const auto& [key, value] : q.items())
    if (key != "quant_method" && key != "fmt" && key != "activation_scheme"
        && key != "weight_block_size" && key != "modules_to_not_convert")
      return refuse("." + key, "is not supported with fp8 (quant_method, "
                               "fmt, activation_scheme, weight_block_size, "
                               "modules_to_not_convert)");
  // Which modules stay unquantized (Qwen3's FP8 checkpoints list them):
  // each tensor's dtype says so too, and is what the loader follows.
  if (q.contains("modules_to_not_convert")) {
    const auto& m = q["modules_to_not_convert"];
    bool names = m.is_array() || m.is_null();
    for (const auto& item : m.is_array() ? m : nlohmann::json::array())
      names = names && item.is_string();
    if (!names)
      return refuse(".modules_to_not_convert:",
                    shown(m) + " is not a list of module names");
  }
  // FineGrainedFP8Config's defaults: e4m3, dynamic.
  if (q.contains("fmt") && q["fmt"] != "e4m3")
    return refuse(".fmt:", shown(q["fmt"]) + " is not supported (e4m3 only)");
  if (q.contains("activation_scheme") && q["activation_scheme"] != "dynamic")
    return refuse(".activation_scheme:",
                  shown(q["activation_scheme"])
                    + " is not supported (dynamic only: weights are "
                      "dequantized at load)");
  if (!q.contains("weight_block_size"))
    return refuse(".weight_block_size",
                  "missing (per-tensor FP8 is not supported)");
  const auto& b = q["weight_block_size"];
  auto positive = [](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<int64_t>() > 0;
  };
  if (!b.is_array() || b.size() != 2 || !positive(b[0]) || !positive(b[1]))
    return refuse(".weight_block_size:",
                  shown(b) + " is not two positive integers");
  return std::optional<fp8_block_size>(
    fp8_block_size{b[0].get<int64_t>(), b[1].get<int64_t>()});
}

// A JSON file's top-level object, or why it is none.
expected<nlohmann::json> json_object_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return status::error(file.string() + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return status::error(file.string() + ": not a JSON object");
  return j;
}

} // namespace

hf_ffn_keys ffn_keys_of(model_family f) {
  switch (f) {
  case model_family::qwen3_moe:
    return {"moe_intermediate_size", "intermediate_size", "num_experts"};
  case model_family::deepseek_v3:
    return {"moe_intermediate_size", "intermediate_size", "n_routed_experts"};
  case model_family::mixtral:
    break;
  }
  // Mixtral has no dense layers: tutti's own key when it has them.
  return {"intermediate_size", "dense_intermediate_size", "num_local_experts"};
}

expected<model_shape> read_hf_config(const fs::path& file) {
  auto read = json_object_of(file);
  if (!read)
    return read.error();
  auto j = std::move(read.value());
  model_shape s;
  status bad;
  auto integer = [&](const char* key, int64_t& out, bool required) {
    if (!bad.ok())
      return;
    if (!j.contains(key)) {
      if (required)
        bad = status::error(file.string() + ": key " + key + " missing");
      return;
    }
    if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0) {
      bad = status::error(file.string() + ": key " + key
                          + " must be a positive integer");
      return;
    }
    out = j[key].get<int64_t>();
  };
  auto count = [&](const char* key, int64_t& out) {
    if (!bad.ok() || !j.contains(key))
      return;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0) {
      bad = status::error(file.string() + ": key " + key
                          + " must be an integer >= 0");
      return;
    }
    out = j[key].get<int64_t>();
  };
  auto number = [&](const char* key, double& out) {
    if (!bad.ok() || !j.contains(key))
      return;
    if (!j[key].is_number() || j[key].get<double>() <= 0) {
      bad = status::error(file.string() + ": key " + key
                          + " must be a positive number");
      return;
    }
    out = j[key].get<double>();
  };
  // Absent: an older `tutti export`, always Mixtral.
  if (j.contains("model_type") && !j["model_type"].is_string())
    return status::error(file.string() + ": key model_type must be a string");
  const auto type = j.value("model_type", std::string("mixtral"));
  const auto family = from_string<model_family>(type);
  if (!family)
    return status::error(file.string() + ": model_type " + type
                         + " is not supported (mixtral, qwen3_moe or "
                           "deepseek_v3)");
  s.family = *family;
  const bool qwen3 = s.family == model_family::qwen3_moe;
  const bool deepseek = s.family == model_family::deepseek_v3;
  if (deepseek)
    deepseek_defaults(j, s);
  const auto ffn = ffn_keys_of(s.family);
  integer("vocab_size", s.vocab, true);
  integer("hidden_size", s.hidden, true);
  integer(ffn.expert_width, s.intermediate, true);
  integer("num_hidden_layers", s.layers, true);
  integer("num_attention_heads", s.q_heads, true);
  integer("num_key_value_heads", s.kv_heads, true);
  integer(ffn.experts, s.experts, true);
  integer("num_experts_per_tok", s.top_k, true);
  integer("max_position_embeddings", s.max_positions, true);
  if (bad.ok() && s.q_heads > 0)
    s.head_dim = s.hidden / s.q_heads;
  if (j.contains("head_dim") && j["head_dim"].is_null())
    j.erase("head_dim"); // Hugging Face's "derive it"
  integer("head_dim", s.head_dim, false);
  number("rope_theta", s.rope_theta);
  number("rms_norm_eps", s.rms_norm_eps);
  number("router_temperature", s.router_temperature);
  // DeepSeek-V3's router keys, on any family (tutti's export writes them
  // when they differ from a softmax router).
  integer("n_group", s.n_group, false);
  integer("topk_group", s.topk_group, false);
  number("routed_scaling_factor", s.routed_scaling_factor);
  // DeepSeek-V3's shared experts and leading dense layers, on any family;
  // the dense width only with dense layers (Qwen3-MoE's intermediate_size
  // is there without them).
  count("n_shared_experts", s.shared_experts);
  count("first_k_dense_replace", s.dense_layers);
  if (s.dense_layers > 0)
    integer(ffn.dense_width, s.dense_intermediate, true);
  count("num_nextn_predict_layers", s.mtp_layers);
  if (bad.ok() && j.contains("scoring_func")) {
    const auto& value = j["scoring_func"];
    std::optional<scoring_func> f;
    if (value.is_string())
      f = from_string<scoring_func>(value.get<std::string>());
    if (!f)
      return status::error(file.string()
                           + ": key scoring_func must be softmax or sigmoid");
    s.scoring = *f;
  }
  // Multi-head latent attention's keys, on any family (DeepSeek-V3's
  // config.json; null q_lora_rank: one q_proj).
  if (j.contains("q_lora_rank") && j["q_lora_rank"].is_null())
    j.erase("q_lora_rank");
  integer("q_lora_rank", s.q_lora_rank, false);
  integer("kv_lora_rank", s.kv_lora_rank, false);
  integer("qk_nope_head_dim", s.qk_nope_head_dim, false);
  integer("qk_rope_head_dim", s.qk_rope_head_dim, false);
  integer("v_head_dim", s.v_head_dim, false);
  if (bad.ok() && j.contains("rope_interleave")) {
    if (!j["rope_interleave"].is_boolean())
      return status::error(file.string()
                           + ": key rope_interleave must be true or false");
    s.rope_interleave = j["rope_interleave"].get<bool>();
  }
  if (bad.ok() && s.mla() && j.contains("rope_scaling")
      && !j["rope_scaling"].is_null())
    return status::error(file.string()
                         + ": key rope_scaling must be null (no scaled rotary "
                           "embedding)");
  if (bad.ok() && qwen3) {
    s.qk_norm = true;
    bad = qwen3_keys(j, s, file.string());
  }
  if (bad.ok() && deepseek)
    bad = deepseek_keys(j, s, file.string());
  if (bad.ok())
    if (auto q = quantization_of(j, file.string()); !q)
      bad = q.error();
  if (!bad.ok())
    return bad;
  if (auto c = check_shape(s); !c.ok())
    return status::error(file.string() + ": " + c.message());
  return s;
}

expected<std::optional<fp8_block_size>> read_hf_quantization(
  const fs::path& file) {
  auto j = json_object_of(file);
  if (!j)
    return j.error();
  return quantization_of(j.value(), file.string());
}

std::string hf_config_text(const store::shard_meta& m) {
  const auto shape = shape_of(m);
  const bool qwen3 = shape.family == model_family::qwen3_moe;
  const auto ffn = ffn_keys_of(shape.family);
  auto number = [&](const char* k) {
    auto j = nlohmann::ordered_json::parse(
      m.strings.count(k) ? m.strings.at(k) : std::string("0"), nullptr, false);
    return j.is_number() ? j : nlohmann::ordered_json(0);
  };
  nlohmann::ordered_json j;
  j["architectures"] = {hf_architecture(shape.family)};
  j["model_type"] = to_string(shape.family);
  j["vocab_size"] = shape.vocab;
  j["hidden_size"] = shape.hidden;
  // Without dense layers a Qwen3-MoE's intermediate_size is written as
  // its experts' width (no dense layer reads it).
  j["intermediate_size"] = shape.intermediate;
  j[ffn.expert_width] = shape.intermediate;
  if (shape.dense_layers > 0)
    j[ffn.dense_width] = shape.dense_intermediate;
  j["num_hidden_layers"] = shape.layers;
  j["num_attention_heads"] = shape.q_heads;
  j["num_key_value_heads"] = shape.kv_heads;
  // DeepSeek-V3's config.json gives MLA's rotated part as head_dim.
  j["head_dim"] = shape.mla() ? shape.qk_rope_head_dim : shape.head_dim;
  j["max_position_embeddings"] = shape.max_positions;
  j["rope_theta"] = number("rope_theta");
  j["rms_norm_eps"] = number("rms_norm_eps");
  j[ffn.experts] = shape.experts;
  j["num_experts_per_tok"] = shape.top_k;
  if (shape.shared_experts > 0 || shape.family == model_family::deepseek_v3)
    j["n_shared_experts"] = shape.shared_experts;
  if (shape.dense_layers > 0 || shape.family == model_family::deepseek_v3)
    j["first_k_dense_replace"] = shape.dense_layers;
  if (qwen3) {
    j["norm_topk_prob"] = shape.norm_topk_prob;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::ordered_json::array();
    j["attention_bias"] = false;
    j["use_sliding_window"] = false;
  }
  if (shape.family == model_family::deepseek_v3) {
    j["norm_topk_prob"] = shape.norm_topk_prob;
    j["topk_method"] = "noaux_tc";
    j["moe_layer_freq"] = 1;
    j["attention_bias"] = false;
    j["rope_scaling"] = nullptr;
  }
  if (shape.scoring != scoring_func::softmax || shape.n_group != 1
      || shape.family == model_family::deepseek_v3) {
    j["scoring_func"] = to_string(shape.scoring);
    j["n_group"] = shape.n_group;
    j["topk_group"] = shape.topk_group;
    j["routed_scaling_factor"] = number("routed_scaling_factor");
  }
  if (shape.mla()) {
    j["q_lora_rank"] = shape.q_lora_rank > 0
                         ? nlohmann::ordered_json(shape.q_lora_rank)
                         : nlohmann::ordered_json(nullptr);
    j["kv_lora_rank"] = shape.kv_lora_rank;
    j["qk_nope_head_dim"] = shape.qk_nope_head_dim;
    j["qk_rope_head_dim"] = shape.qk_rope_head_dim;
    j["v_head_dim"] = shape.v_head_dim;
    j["rope_interleave"] = shape.rope_interleave;
  }
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "float32";
  j["tutti_step"] = m.step;
  return j.dump(2) + "\n";
}

} // namespace tutti::model
