// Model presets and the planning reader (presets.hpp). The numbers are the
// published configurations (each model's Hugging Face config.json;
// intermediate_size is the routed experts' width). DeepSeek-V3's shared
// expert and three leading dense layers are config keys
// (moe_config.n_shared_experts, first_k_dense_replace,
// model.dense_intermediate_size); what the config has no key for is
// carried in job_config::preset for the plan: DeepSeek-V3's multi-head
// latent attention. Not counted: DeepSeek-V3's multi-token-prediction
// module (one more layer and its head, 14B parameters, used in training
// only).

#include "tutti/config/presets.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <utility>

namespace tutti {

namespace {

struct preset {
  const char* name;
  const char* family; // model.family
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads;
  int64_t head_dim; // model.head_dim; 0 = hidden / heads
  int64_t max_seq;
  double rope_theta;
  int64_t experts, top_k;
  // model.dense_intermediate_size, moe_config.first_k_dense_replace and
  // n_shared_experts.
  int64_t dense_intermediate, dense_layers, shared_experts;
  preset_shape shape;
};

// preset_shape: q_lora_rank, kv_lora_rank, qk_nope_head_dim,
// qk_rope_head_dim, v_head_dim. DeepSeek-V3 is planned as a Mixtral-family
// model with its attention counted; it does not train or serve yet.
const preset presets[] = {
  {"mixtral-8x7b", "mixtral", 32000, 4096, 14336, 32, 32, 8, 0, 32768, 1e6, 8,
   2, 0, 0, 0, {}},
  {"mixtral-8x22b", "mixtral", 32768, 6144, 16384, 56, 48, 8, 0, 65536, 1e6,
   8, 2, 0, 0, 0, {}},
  {"deepseek-v3", "mixtral", 129280, 7168, 2048, 61, 128, 128, 0, 163840,
   10000, 256, 8, 18432, 3, 1, {1536, 512, 128, 64, 128}},
  {"qwen3-30b-a3b", "qwen3_moe", 151936, 2048, 768, 48, 32, 4, 128, 40960,
   1e6, 128, 8, 0, 0, 0, {}},
  {"qwen3-235b-a22b", "qwen3_moe", 151936, 4096, 1536, 94, 64, 4, 128, 40960,
   1e6, 128, 8, 0, 0, 0, {}},
};

// The keys a layout sets (search_layouts' choices).
const std::pair<const char*, const char*> layout_keys[] = {
  {"cluster_config", "tensor_model_parallel_size"},
  {"cluster_config", "pipeline_model_parallel_size"},
  {"cluster_config", "pipeline_layers"},
  {"cluster_config", "pipeline_first_stage_layers"},
  {"cluster_config", "pipeline_last_stage_layers"},
  {"cluster_config", "ep_size"},
  {"train", "micro_batches"},
  {"train", "recompute"},
  {"train", "optimizer_sharding"},
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
                                       std::vector<std::string>& notes,
                                       bool any_layout) {
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
  const preset* chosen = nullptr;
  if (!name.empty()) {
    const auto* p = chosen = find_preset(name);
    if (!p)
      return status::error("model preset " + name + " is unknown; presets: "
                           + names_text());
    YAML::Node m;
    m["family"] = p->family;
    m["vocab_size"] = p->vocab;
    m["hidden_size"] = p->hidden;
    m["intermediate_size"] = p->intermediate;
    m["num_hidden_layers"] = p->layers;
    m["num_attention_heads"] = p->heads;
    m["num_key_value_heads"] = p->kv_heads;
    if (p->head_dim > 0)
      m["head_dim"] = p->head_dim;
    m["max_seq_len"] = p->max_seq;
    m["rope_theta"] = p->rope_theta;
    if (p->dense_layers > 0)
      m["dense_intermediate_size"] = p->dense_intermediate;
    root["model"] = m;
    if (!root["moe_config"])
      root["moe_config"] = YAML::Node(YAML::NodeType::Map);
    auto moe = root["moe_config"];
    if (p->dense_layers > 0 && !moe["first_k_dense_replace"])
      moe["first_k_dense_replace"] = p->dense_layers;
    if (p->shared_experts > 0 && !moe["n_shared_experts"])
      moe["n_shared_experts"] = p->shared_experts;
    std::string kept;
    if (!moe["num_experts"])
      moe["num_experts"] = p->experts;
    else if (moe["num_experts"].Scalar() != std::to_string(p->experts))
      kept = "the config's expert count";
    if (!moe["router_top_k"])
      moe["router_top_k"] = p->top_k;
    else if (moe["router_top_k"].Scalar() != std::to_string(p->top_k))
      kept += (kept.empty() ? "the config's " : " and ") + std::string("top-k");
    notes.push_back("model: preset " + name + " (" + std::to_string(p->layers)
                    + " layers, hidden " + std::to_string(p->hidden) + "), "
                    + moe["num_experts"].as<std::string>() + " experts top-"
                    + moe["router_top_k"].as<std::string>());
    if (!kept.empty())
      notes.push_back("moe_config: " + kept + " kept over the preset's ("
                      + std::to_string(p->experts) + " experts top-"
                      + std::to_string(p->top_k) + ")");
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
    t["precision"]["params"] = "bf16";
    t["precision"]["grads"] = "bf16";
    root["train"] = t;
    notes.push_back("train: not in the config; planned with "
                    "global_batch_size "
                    + std::to_string(world) + " (one sequence per rank), "
                    + "seq_len " + t["seq_len"].as<std::string>()
                    + ", bf16 parameters and gradients with fp32 master "
                      "weights and moments (train.precision, as GPU "
                      "clusters train)");
  }
  auto cluster = root["cluster_config"];
  if (!cluster || !cluster["device_memory_gb"]) {
    root["cluster_config"]["device_memory_gb"] = 80;
    notes.push_back("cluster_config.device_memory_gb: not set; planned for "
                    "80 GB devices");
  }
  for (const char* section : {"data", "run"})
    if (!root[section])
      root[section]["dir"] = std::string("(planning only)");
  YAML::Emitter out;
  out << root;
  auto parsed = parse_job_config(out.c_str(), source_name);
  if (parsed && chosen)
    parsed->preset = chosen->shape;
  if (parsed || !any_layout)
    return parsed;
  // The search picks its own layout: one the config gets wrong is dropped,
  // and said so, rather than refused. Without it the default layout (all
  // ranks data parallel) may not divide the batch: then the first of
  // TP x PP (PP dividing the layers) that reads stands in; the search
  // replaces it anyway.
  for (const auto& [section, key] : layout_keys)
    if (root[section] && root[section][key])
      root[section].remove(key);
  const auto layers = root["model"]["num_hidden_layers"];
  const int64_t depth =
    layers && layers.IsScalar() ? layers.as<int64_t>(0) : 1;
  for (int64_t pp = 1; pp <= std::max<int64_t>(1, depth); pp *= 2) {
    if (depth % pp != 0)
      continue;
    for (int64_t tp = 1; tp <= 8; tp *= 2) {
      root["cluster_config"]["tensor_model_parallel_size"] = tp;
      root["cluster_config"]["pipeline_model_parallel_size"] = pp;
      YAML::Emitter again;
      again << root;
      auto fixed = parse_job_config(again.c_str(), source_name);
      if (!fixed)
        continue;
      notes.push_back(parsed.message() + "; --search chooses the layout");
      if (chosen)
        fixed->preset = chosen->shape;
      return fixed;
    }
  }
  return parsed;
}

} // namespace tutti
