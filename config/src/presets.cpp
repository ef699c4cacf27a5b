// Model presets and the planning reader (presets.hpp). The numbers are the
// published configurations; DeepSeek-V3's multi-head latent attention, its
// shared expert and its three dense layers are planned as grouped-query
// attention with 128 heads and 61 MoE layers of 256 routed experts.

#include "tutti/config/presets.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>

namespace tutti {

namespace {

struct preset {
  const char* name;
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, max_seq;
  double rope_theta;
  int64_t experts, top_k;
};

constexpr preset presets[] = {
  {"mixtral-8x7b", 32000, 4096, 14336, 32, 32, 8, 32768, 1e6, 8, 2},
  {"mixtral-8x22b", 32768, 6144, 16384, 56, 48, 8, 65536, 1e6, 8, 2},
  {"deepseek-v3", 129280, 7168, 2048, 61, 128, 128, 163840, 10000, 256, 8},
};

const preset* find_preset(const std::string& name) {
  for (const auto& p : presets)
    if (name == p.name)
      return &p;
  return nullptr;
}

std::string names_text() {
  std::string out;
  const auto names = model_preset_names();
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

} // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> out;
  for (const auto& p : presets)
    out.emplace_back(p.name);
  return out;
}

expected<job_config> parse_plan_config(const std::string& yaml_text,
                                       const std::string& source_name,
                                       const std::string& preset_name,
                                       std::vector<std::string>& notes) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& ex) {
    return status::error(source_name + ": not valid YAML: " + ex.what());
  }
  if (!root.IsMap())
    return status::error(source_name + ": not a YAML mapping of sections");
  std::string name = preset_name;
  if (name.empty() && root["model"] && root["model"].IsScalar())
    name = root["model"].as<std::string>();
  if (name.empty() && !root["model"])
    return status::error(source_name
                         + " has no model section: add one, name a preset "
                           "(model: NAME) or pass --model NAME; presets: "
                         + names_text());
  if (!name.empty()) {
    const auto* p = find_preset(name);
    if (!p)
      return status::error("model preset " + name + " is unknown; presets: "
                           + names_text());
    YAML::Node m;
    m["vocab_size"] = p->vocab;
    m["hidden_size"] = p->hidden;
    m["intermediate_size"] = p->intermediate;
    m["num_hidden_layers"] = p->layers;
    m["num_attention_heads"] = p->heads;
    m["num_key_value_heads"] = p->kv_heads;
    m["max_seq_len"] = p->max_seq;
    m["rope_theta"] = p->rope_theta;
    root["model"] = m;
    if (!root["moe_config"])
      root["moe_config"] = YAML::Node(YAML::NodeType::Map);
    auto moe = root["moe_config"];
    if (!moe["num_experts"])
      moe["num_experts"] = p->experts;
    if (!moe["router_top_k"])
      moe["router_top_k"] = p->top_k;
    notes.push_back("model: preset " + name + " (" + std::to_string(p->layers)
                    + " layers, hidden " + std::to_string(p->hidden) + "), "
                    + moe["num_experts"].as<std::string>() + " experts top-"
                    + moe["router_top_k"].as<std::string>());
  }
  if (!root["train"]) {
    const auto cluster = root["cluster_config"];
    const int64_t world = cluster && cluster["world_size"]
                            ? cluster["world_size"].as<int64_t>()
                            : 1;
    const int64_t max_seq = root["model"]["max_seq_len"]
                              ? root["model"]["max_seq_len"].as<int64_t>()
                              : 4096;
    YAML::Node t;
    t["steps"] = 1;
    t["global_batch_size"] = world;
    t["seq_len"] = std::min<int64_t>(max_seq, 4096);
    root["train"] = t;
    notes.push_back("train: not in the config; planned with "
                    "global_batch_size "
                    + std::to_string(world) + " (one sequence per rank), "
                    + "seq_len " + t["seq_len"].as<std::string>());
  }
  for (const char* section : {"data", "run"})
    if (!root[section])
      root[section]["dir"] = std::string("(planning only)");
  YAML::Emitter out;
  out << root;
  return parse_job_config(out.c_str(), source_name);
}

} // namespace tutti
