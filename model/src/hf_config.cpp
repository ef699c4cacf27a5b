#include "tutti/model/hf_config.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace tutti::model {

namespace fs = std::filesystem;

expected<model_shape> read_hf_config(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return status::error(file.string() + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return status::error(file.string() + ": not a JSON object");
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
  integer("vocab_size", s.vocab, true);
  integer("hidden_size", s.hidden, true);
  integer("intermediate_size", s.intermediate, true);
  integer("num_hidden_layers", s.layers, true);
  integer("num_attention_heads", s.q_heads, true);
  integer("num_key_value_heads", s.kv_heads, true);
  integer("num_local_experts", s.experts, true);
  integer("num_experts_per_tok", s.top_k, true);
  integer("max_position_embeddings", s.max_positions, true);
  if (bad.ok() && s.q_heads > 0)
    s.head_dim = s.hidden / s.q_heads;
  integer("head_dim", s.head_dim, false);
  number("rope_theta", s.rope_theta);
  number("rms_norm_eps", s.rms_norm_eps);
  number("router_temperature", s.router_temperature);
  if (!bad.ok())
    return bad;
  if (auto c = check_shape(s); !c.ok())
    return status::error(file.string() + ": " + c.message());
  return s;
}

std::string hf_config_text(const store::shard_meta& m) {
  auto i = [&](const char* k) { return m.ints.count(k) ? m.ints.at(k) : 0; };
  auto number = [&](const char* k) {
    auto j = nlohmann::ordered_json::parse(
      m.strings.count(k) ? m.strings.at(k) : std::string("0"), nullptr, false);
    return j.is_number() ? j : nlohmann::ordered_json(0);
  };
  nlohmann::ordered_json j;
  j["architectures"] = {"MixtralForCausalLM"};
  j["model_type"] = "mixtral";
  j["vocab_size"] = i("vocab_size");
  j["hidden_size"] = i("hidden_size");
  j["intermediate_size"] = i("intermediate_size");
  j["num_hidden_layers"] = i("num_hidden_layers");
  j["num_attention_heads"] = i("num_attention_heads");
  j["num_key_value_heads"] = i("num_key_value_heads");
  j["head_dim"] = i("hidden_size")
                  / std::max<int64_t>(1, i("num_attention_heads"));
  j["max_position_embeddings"] = i("max_seq_len");
  j["rope_theta"] = number("rope_theta");
  j["rms_norm_eps"] = number("rms_norm_eps");
  j["num_local_experts"] = i("num_experts");
  j["num_experts_per_tok"] = i("router_top_k");
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "float32";
  j["tutti_step"] = m.step;
  return j.dump(2) + "\n";
}

} // namespace tutti::model
