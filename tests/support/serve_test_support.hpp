#pragma once
// Shared by the serve tests: a randomly initialised Mixtral or Qwen3-MoE
// model (tutti's own initialisation, with non-zero router biases and QK-norm
// weights so they matter), as a name -> tensor map and written out as a
// `tutti export` directory.

#include <nlohmann/json.hpp>

#include <cerrno> // program_invocation_short_name
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/model/family.hpp"
#include "tutti/model/param_layout.hpp"
#include "tutti/model/tensor_names.hpp"
#include "tutti/serve/model.hpp"
#include "tutti/store/safetensors.hpp"

namespace tutti::testing {

// The model part of a job config (train.seq_len = max_seq_len);
// `model_keys` are further lines of the model section ("  family: ...\n").
inline job_config serve_test_config(int vocab, int hidden, int intermediate,
                                    int layers, int heads, int kv_heads,
                                    int experts, int top_k, int max_seq,
                                    const std::string& model_keys = "") {
  std::ostringstream c;
  c << "cluster_config:\n  world_size: 1\n  nnodes: 1\n  nproc_per_node: 1\n"
       "  ep_size: 1\nmodel:\n"
    << model_keys << "  vocab_size: " << vocab << "\n  hidden_size: " << hidden
    << "\n  intermediate_size: " << intermediate
    << "\n  num_hidden_layers: " << layers
    << "\n  num_attention_heads: " << heads
    << "\n  num_key_value_heads: " << kv_heads << "\n  max_seq_len: " << max_seq
    << "\nmoe_config:\n  num_experts: " << experts
    << "\n  router_top_k: " << top_k
    << "\ntrain:\n  steps: 1\n  global_batch_size: 1\n  seq_len: " << max_seq
    << "\n  seed: 7\ndata:\n  dir: unused\nrun:\n  dir: unused\n";
  auto cfg = parse_job_config(c.str(), "serve test config");
  REQUIRE(cfg.ok());
  return cfg.value();
}

// A Qwen3-MoE model: QK-norm, heads of `head_dim` (heads * head_dim need
// not be `hidden`), gates renormalised or not.
inline job_config qwen3_test_config(int vocab, int hidden, int intermediate,
                                    int layers, int heads, int kv_heads,
                                    int head_dim, int experts, int top_k,
                                    int max_seq, bool norm_topk_prob = true) {
  auto cfg = serve_test_config(
    vocab, hidden, intermediate, layers, heads, kv_heads, experts, top_k,
    max_seq,
    "  family: qwen3_moe\n  head_dim: " + std::to_string(head_dim) + "\n");
  cfg.moe.norm_topk_prob = norm_topk_prob;
  return cfg;
}

// DeepSeek-V3 in small: width 24, 4 heads, 2 layers, 6 experts, top-2;
// MLA (a latent of 12, a query latent of 10, queries and keys of 6 + 4,
// values of 5, interleaved rotary slices), a leading dense layer of width
// 20, a shared expert, the group-limited sigmoid router (2 groups of 3,
// one kept) scaled by 2.5.
inline job_config deepseek_test_config(int vocab, int max_seq) {
  auto cfg = serve_test_config(vocab, 24, 16, 2, 4, 4, 6, 2, max_seq,
                               "  kv_lora_rank: 12\n  q_lora_rank: 10\n"
                               "  qk_nope_head_dim: 6\n  qk_rope_head_dim: 4\n"
                               "  v_head_dim: 5\n  rope_interleave: true\n");
  cfg.model.family = model_family::deepseek_v3;
  cfg.model.dense_intermediate_size = 20;
  cfg.moe.first_k_dense_replace = 1;
  cfg.moe.n_shared_experts = 1;
  cfg.moe.scoring = scoring_func::sigmoid;
  cfg.moe.n_group = 2;
  cfg.moe.topk_group = 1;
  cfg.moe.routed_scaling_factor = 2.5;
  return cfg;
}

using tensor_map = std::map<std::string, std::vector<float>>;

// Every tensor by its Hugging Face name, initialised from `seed` (a leading
// dense layer without experts and router biases).
inline tensor_map random_model_tensors(const job_config& cfg, uint64_t seed) {
  tensor_map out;
  auto dense = model::dense_layout(cfg.model, cfg.moe);
  std::vector<float> values(dense.total());
  model::init_params(dense, values.data(), seed, 0.1);
  for (const auto& t : dense.tensors())
    out[t.name].assign(values.begin() + t.offset,
                       values.begin() + t.offset + t.numel);
  const int64_t E = cfg.moe.num_experts;
  auto experts = model::expert_layout(cfg.model, 0, E);
  std::vector<float> ev(experts.total());
  model::init_expert_params(experts, ev.data(), cfg.model, 0, E, seed, 0.1);
  const auto& m = cfg.model;
  const int64_t per = m.intermediate_size * m.hidden_size;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> bias(-0.05f, 0.05f);
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    if (cfg.moe.dense_layer(l))
      continue; // a dense layer: no experts, no router biases
    const auto pre = "model.layers." + std::to_string(l) + ".block_sparse_moe.";
    for (const char* w : {"w1", "w2", "w3"}) {
      const auto off = experts.at(model::expert_block_name(l, w)).offset;
      for (int64_t e = 0; e < E; ++e)
        out[pre + "experts." + std::to_string(e) + "." + w + ".weight"].assign(
          ev.begin() + off + e * per, ev.begin() + off + (e + 1) * per);
    }
    auto& b = out[pre + "gate.e_score_correction_bias"];
    for (int64_t e = 0; e < E; ++e)
      b.push_back(bias(rng));
    // QK-norm weights away from their initial ones, so they matter.
    for (const char* norm : {model::names::q_norm, model::names::k_norm})
      if (auto it = out.find(model::names::layer(l, norm)); it != out.end())
        for (auto& w : it->second)
          w += bias(rng) * 10;
  }
  return out;
}

// The Hugging Face shape of tensor `name` of cfg's model.
inline std::vector<int64_t> hf_shape(const job_config& cfg,
                                     const std::string& name) {
  const auto& m = cfg.model;
  if (name.find(".experts.") != std::string::npos)
    return name.find(".w2.") != std::string::npos
             ? std::vector<int64_t>{m.hidden_size, m.intermediate_size}
             : std::vector<int64_t>{m.intermediate_size, m.hidden_size};
  if (name.find("e_score_correction_bias") != std::string::npos)
    return {cfg.moe.num_experts};
  return model::dense_layout(cfg.model, cfg.moe).at(name).shape;
}

// The config.json of cfg's model, in its family's keys.
inline nlohmann::json hf_config_json(const job_config& cfg) {
  const auto& m = cfg.model;
  const bool qwen3 = m.family == model_family::qwen3_moe;
  const bool deepseek = m.family == model_family::deepseek_v3;
  nlohmann::json j;
  j["architectures"] = {qwen3      ? "Qwen3MoeForCausalLM"
                        : deepseek ? "DeepseekV3ForCausalLM"
                                   : "MixtralForCausalLM"};
  j["model_type"] = to_string(m.family);
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.hidden_size;
  j[qwen3 || deepseek ? "moe_intermediate_size" : "intermediate_size"] =
    m.intermediate_size;
  j["num_hidden_layers"] = m.num_hidden_layers;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_key_value_heads"] = m.num_key_value_heads;
  j["head_dim"] = m.head_dim();
  j["max_position_embeddings"] = m.max_seq_len;
  j["rope_theta"] = m.rope_theta;
  j["rms_norm_eps"] = m.rms_norm_eps;
  j[qwen3 ? "num_experts" : deepseek ? "n_routed_experts" : "num_local_experts"] =
    cfg.moe.num_experts;
  j["num_experts_per_tok"] = cfg.moe.router_top_k;
  if (qwen3) {
    j["norm_topk_prob"] = cfg.moe.norm_topk_prob;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::json::array();
    j["tie_word_embeddings"] = false;
  }
  if (m.mla()) {
    j["q_lora_rank"] = m.q_lora_rank > 0 ? nlohmann::json(m.q_lora_rank)
                                         : nlohmann::json(nullptr);
    j["kv_lora_rank"] = m.kv_lora_rank;
    j["qk_nope_head_dim"] = m.qk_nope_head_dim;
    j["qk_rope_head_dim"] = m.qk_rope_head_dim;
    j["v_head_dim"] = m.v_head_dim;
    j["rope_interleave"] = m.rope_interleave;
    j["head_dim"] = m.qk_rope_head_dim;
  }
  // DeepSeek-V3's config.json gives them all (absent ones would take
  // DeepseekV3Config's defaults).
  if (cfg.moe.n_shared_experts > 0 || deepseek)
    j["n_shared_experts"] = cfg.moe.n_shared_experts;
  if (cfg.moe.first_k_dense_replace > 0 || deepseek) {
    j["first_k_dense_replace"] = cfg.moe.first_k_dense_replace;
    j[qwen3 || deepseek ? "intermediate_size" : "dense_intermediate_size"] =
      m.dense_intermediate_size;
  }
  if (deepseek) {
    j["norm_topk_prob"] = cfg.moe.norm_topk_prob;
    j["topk_method"] = "noaux_tc";
  }
  if (cfg.moe.scoring == scoring_func::sigmoid || deepseek) {
    j["scoring_func"] = to_string(cfg.moe.scoring);
    j["n_group"] = cfg.moe.n_group;
    j["topk_group"] = cfg.moe.topk_group;
    j["routed_scaling_factor"] = cfg.moe.routed_scaling_factor;
  }
  return j;
}

// config.json + model.safetensors, as `tutti export --format hf` writes
// (tensors named by tutti, written under the family's names).
inline void write_export_dir(const std::filesystem::path& dir,
                             const job_config& cfg, const tensor_map& t) {
  std::filesystem::create_directories(dir);
  write_text(dir / "config.json", hf_config_json(cfg).dump(2));
  std::vector<store::named_tensor> tensors;
  for (const auto& [name, values] : t)
    tensors.push_back({model::hf_tensor_name(cfg.model.family, name),
                       hf_shape(cfg, name), values});
  REQUIRE(store::write_safetensors(dir / "model.safetensors", tensors).ok());
}

// `n` tokens below `vocab`, drawn from `seed`.
inline std::vector<int32_t> random_prompt(uint32_t seed, int64_t n,
                                          int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(n);
  for (auto& t : out)
    t = static_cast<int32_t>(rng() % vocab);
  return out;
}

// The serve section of a 2-rank service of `model`, named tiny, at
// 127.0.0.1:`port`; `extra` adds keys.
inline std::string tiny_service_yaml(const std::filesystem::path& model,
                                     int port, const std::string& extra = "") {
  return "serve:\n  model: " + model.string()
         + "\n  model_name: tiny\n  listen: 127.0.0.1:" + std::to_string(port)
         + "\n  ep_size: 2\n  max_sequences: 4\n  kv_cache_bytes: 4MiB\n"
           "  step_timeout_s: 20\n"
         + extra;
}

// Writes a random model of `cfg` (random_model_tensors) into `dir` as
// write_export_dir does; returns `dir`.
inline std::filesystem::path write_random_export(
  const std::filesystem::path& dir, const job_config& cfg, uint64_t seed) {
  write_export_dir(dir, cfg, random_model_tensors(cfg, seed));
  return dir;
}

// A random model of `cfg`, exported once per test process into
// scratch(name)/export and loaded afresh on every call.
inline serve::served_model random_served_model(const std::string& name,
                                               const job_config& cfg,
                                               uint64_t seed) {
  static std::map<std::string, std::filesystem::path> exported;
  auto& dir = exported[name];
  if (dir.empty()) {
    // Under the test program's own name: several programs share a model
    // (serve_requests.hpp) and CTest runs them side by side.
    dir = scratch(std::string(program_invocation_short_name) + "_" + name)
          / "export";
    write_export_dir(dir, cfg, random_model_tensors(cfg, seed));
  }
  auto m = serve::load_model(dir);
  REQUIRE(m.ok());
  return std::move(m.value());
}

} // namespace tutti::testing
