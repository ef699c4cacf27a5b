// Qwen3-MoE end to end: a tiny random Hugging Face checkpoint
// (Qwen3MoeForCausalLM's config.json and tensor names, safetensors) gives,
// in tutti's training forward and in the serving engine (prefill, and
// decode step by step over the KV cache), the logits of an independent
// float64 forward of the published architecture (qwen3_reference.hpp)
// within float32 rounding, and the same greedy tokens; with gates
// renormalised and not, and with DeepSeek-V3's group-limited sigmoid
// router (its correction bias in the checkpoint), and with DeepSeek-V3's
// shared experts and a leading dense layer. Bad checkpoints are refused in
// one line naming the key or tensor.

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>

#include "qwen3_reference.hpp"
#include "serve_test_support.hpp"
#include "training_forward.hpp"
#include "tutti/model/hf_config.hpp"
#include "tutti/model/model_shape.hpp"
#include "tutti/serve/engine.hpp"
#include "tutti/serve/kv_cache.hpp"
#include "tutti/serve/sampler.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// Width 20, 4 query heads over 2 key/value heads of 8: heads * head_dim is
// 32, not the width, as in Qwen3-MoE. 6 experts, top-2.
constexpr int V = 40, D = 20, F = 16, L = 2, HQ = 4, HKV = 2, HD = 8, E = 6,
              K = 2, P = 12;

job_config test_config(bool norm_topk_prob) {
  return qwen3_test_config(V, D, F, L, HQ, HKV, HD, E, K, P, norm_topk_prob);
}

// Three groups of two experts, two kept; gates scaled.
job_config sigmoid_config() {
  auto cfg = test_config(true);
  cfg.moe.scoring = scoring_func::sigmoid;
  cfg.moe.n_group = 3;
  cfg.moe.topk_group = 2;
  cfg.moe.routed_scaling_factor = 2.5;
  return cfg;
}

// Three layers, the first a dense SwiGLU MLP of width 24, the others with
// two shared experts (width 32) beside the routed ones.
job_config feed_forward_config() {
  auto cfg = qwen3_test_config(V, D, F, 3, HQ, HKV, HD, E, K, P, true);
  cfg.moe.n_shared_experts = 2;
  cfg.moe.first_k_dense_replace = 1;
  cfg.model.dense_intermediate_size = 24;
  return cfg;
}

// A Qwen3-MoE checkpoint as Hugging Face writes one (no router biases but
// for the sigmoid router's, no experts in a dense layer); returns its
// tensors under tutti's names.
tensor_map write_checkpoint(const fs::path& dir, const job_config& cfg) {
  auto t = random_model_tensors(cfg, 31);
  namespace names = model::names;
  for (int64_t l = 0; l < cfg.model.num_hidden_layers; ++l) {
    const bool dense = cfg.moe.dense_layer(l);
    if (dense || cfg.moe.scoring != scoring_func::sigmoid)
      t.erase(names::layer(l, names::router_bias));
    for (int64_t e = 0; e < E && dense; ++e)
      for (const char* w : {"w1", "w2", "w3"})
        t.erase(names::expert(l, e, w));
  }
  write_export_dir(dir, cfg, t);
  return t;
}

// The reference over the checkpoint's file as written, by its names.
qwen3_reference reference_of(const fs::path& dir, const job_config& cfg) {
  qwen3_reference r{V,
                    D,
                    F,
                    cfg.model.num_hidden_layers,
                    HQ,
                    HKV,
                    HD,
                    E,
                    K,
                    cfg.moe.norm_topk_prob,
                    cfg.model.rope_theta,
                    cfg.model.rms_norm_eps,
                    {}};
  if (cfg.moe.scoring == scoring_func::sigmoid)
    r.sigmoid_router = {cfg.moe.n_group, cfg.moe.topk_group,
                        cfg.moe.routed_scaling_factor};
  r.n_shared_experts = cfg.moe.n_shared_experts;
  r.first_k_dense_replace = cfg.moe.first_k_dense_replace;
  r.dense_inter = cfg.model.dense_intermediate_size;
  auto read = store::read_safetensors(dir / "model.safetensors");
  REQUIRE(read.ok());
  for (const auto& t : read.value())
    r.w[t.name].assign(t.data.begin(), t.data.end());
  return r;
}

std::vector<double> log_softmax(const std::vector<double>& x) {
  const double mx = *std::max_element(x.begin(), x.end());
  double z = 0;
  for (double v : x)
    z += std::exp(v - mx);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = x[i] - mx - std::log(z);
  return out;
}

int32_t argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// The worst difference of log-probabilities, relative to max(1, |ref|).
double worst(const std::vector<double>& got, const std::vector<double>& ref) {
  double w = 0;
  for (size_t j = 0; j < ref.size(); ++j)
    w = std::max(w,
                 std::abs(got[j] - ref[j]) / std::max(1.0, std::abs(ref[j])));
  return w;
}

void check_against_reference(const job_config& cfg, const char* name) {
  const bool norm_topk_prob = cfg.moe.norm_topk_prob;
  const int64_t layers = cfg.model.num_hidden_layers;
  const auto dir = scratch(name) / "hf";
  const auto tensors = write_checkpoint(dir, cfg);
  const auto ref = reference_of(dir, cfg);
  REQUIRE(ref.w.count("model.layers.1.mlp.experts.5.down_proj.weight"));
  REQUIRE(ref.w.count("model.layers.0.self_attn.q_norm.weight"));
  const auto prompt = random_prompt(9, P, V);
  const auto want = ref.logits(prompt);

  auto loaded = serve::load_model(dir);
  INFO(loaded.message());
  REQUIRE(loaded.ok());
  const auto& m = loaded.value();
  CHECK(m.shape.family == model_family::qwen3_moe);
  CHECK(m.shape.head_dim == HD);
  CHECK(m.shape.norm_topk_prob == norm_topk_prob);
  CHECK(m.shape.scoring == cfg.moe.scoring);
  CHECK(m.shape.n_group == cfg.moe.n_group);

  SECTION("serving: prefill of the whole prompt") {
    serve::kv_cache cache({layers, HKV, HD, 4}, 8);
    serve::engine engine(m, cache);
    std::vector<int32_t> blocks;
    REQUIRE(cache.reserve(blocks, P));
    std::vector<float> logits;
    REQUIRE(engine
              .forward(
                {{prompt.data(), P, 0, &blocks, serve::seq_chunk::logits::all}},
                logits)
              .ok());
    double w = 0;
    for (int64_t p = 0; p < P; ++p)
      w = std::max(w, worst(serve::log_softmax(logits.data() + p * V, V),
                            log_softmax(want[p])));
    INFO("worst relative difference " << w);
    CHECK(w < 1e-5);
  }
  SECTION("serving: greedy decode token by token over the KV cache") {
    serve::kv_cache cache({layers, HKV, HD, 4}, 8);
    serve::engine engine(m, cache);
    std::vector<int32_t> blocks, seq(prompt.begin(), prompt.begin() + 4);
    std::vector<float> logits;
    REQUIRE(cache.reserve(blocks, 4));
    REQUIRE(
      engine
        .forward({{seq.data(), 4, 0, &blocks, serve::seq_chunk::logits::last}},
                 logits)
        .ok());
    double w = 0;
    while (static_cast<int64_t>(seq.size()) < P) {
      // The reference recomputes the whole sequence at every step.
      const auto r = ref.logits(seq).back();
      w = std::max(w,
                   worst(serve::log_softmax(logits.data(), V), log_softmax(r)));
      const int32_t next = argmax(logits.data(), V);
      CHECK(next == std::max_element(r.begin(), r.end()) - r.begin());
      const int64_t pos = static_cast<int64_t>(seq.size());
      seq.push_back(next);
      REQUIRE(cache.reserve(blocks, pos + 1));
      REQUIRE(engine
                .forward({{seq.data() + pos, 1, pos, &blocks,
                           serve::seq_chunk::logits::last}},
                         logits)
                .ok());
    }
    INFO("worst relative difference " << w);
    CHECK(w < 1e-5);
  }
  SECTION("training forward") {
    const auto got = training_logprobs(cfg, tensors, prompt);
    double w = 0;
    for (int64_t p = 0; p < P; ++p)
      w = std::max(w, worst(got[p], log_softmax(want[p])));
    INFO("worst relative difference " << w);
    CHECK(w < 1e-5);
  }
}

// Writes a checkpoint after `spoil` changed its config.json or its tensors
// (under the checkpoint's names), and returns the loader's refusal.
std::string refusal(
  const std::string& name,
  const std::function<void(
    nlohmann::json&, std::map<std::string, store::named_tensor>&)>& spoil) {
  const auto cfg = test_config(true);
  std::map<std::string, store::named_tensor> t;
  for (const auto& [n, values] : random_model_tensors(cfg, 32)) {
    const auto hf = model::hf_tensor_name(model_family::qwen3_moe, n);
    if (n.find("e_score_correction_bias") == std::string::npos)
      t[hf] = {hf, hf_shape(cfg, n), values};
  }
  auto j = hf_config_json(cfg);
  spoil(j, t);
  const auto dir = scratch("qwen3_moe_bad_" + name) / "hf";
  std::vector<store::named_tensor> tensors;
  for (const auto& [n, tensor] : t)
    tensors.push_back(tensor);
  fs::create_directories(dir);
  write_text(dir / "config.json", j.dump(2));
  REQUIRE(store::write_safetensors(dir / "model.safetensors", tensors).ok());
  auto m = serve::load_model(dir);
  REQUIRE_FALSE(m.ok());
  const auto msg = m.message();
  CHECK(msg.find('\n') == std::string::npos);
  return msg;
}

} // namespace

TEST_CASE("Qwen3-MoE with renormalised gates: tutti's logits are the "
          "reference's",
          "[unit]") {
  check_against_reference(test_config(true), "qwen3_moe_norm");
}

TEST_CASE("Qwen3-MoE without renormalisation: tutti's logits are the "
          "reference's",
          "[unit]") {
  check_against_reference(test_config(false), "qwen3_moe_all");
}

TEST_CASE("DeepSeek-V3's group-limited sigmoid router: tutti's logits are "
          "the reference's",
          "[unit]") {
  check_against_reference(sigmoid_config(), "qwen3_moe_sigmoid");
}

TEST_CASE("DeepSeek-V3's shared experts and a leading dense layer: tutti's "
          "logits are the reference's",
          "[unit]") {
  check_against_reference(feed_forward_config(), "qwen3_moe_feed_forward");
}

TEST_CASE("bad Qwen3-MoE checkpoints are refused in one line naming it",
          "[unit]") {
  const auto q_norm = model::names::layer(1, model::names::q_norm);
  CHECK(has(refusal("type", [](auto& j, auto&) { j["model_type"] = "qwen9"; }),
            "model_type qwen9"));
  CHECK(
    has(refusal("step", [](auto& j, auto&) { j["decoder_sparse_step"] = 2; }),
        "decoder_sparse_step"));
  CHECK(
    has(refusal("dense", [](auto& j, auto&) { j["mlp_only_layers"] = {0}; }),
        "mlp_only_layers"));
  CHECK(has(refusal("no_q_norm", [&](auto&, auto& t) { t.erase(q_norm); }),
            "tensor " + q_norm + " missing"));
  CHECK(has(refusal("q_norm_shape",
                    [&](auto&, auto& t) {
                      t[q_norm].shape = {HD + 2};
                      t[q_norm].data.resize(HD + 2);
                    }),
            "tensor " + q_norm + " has shape [10], expected [8]"));
  const auto expert = "model.layers.0.mlp.experts.2.up_proj.weight";
  CHECK(has(refusal("expert_shape",
                    [&](auto&, auto& t) {
                      t[expert].shape = {D, F};
                    }),
            std::string("tensor ") + expert + " has shape [20,16]"));
  auto groups = [](int64_t n_group, int64_t topk_group) {
    return [=](auto& j, auto&) {
      j["scoring_func"] = "sigmoid";
      j["n_group"] = n_group;
      j["topk_group"] = topk_group;
    };
  };
  CHECK(has(refusal("n_group", groups(4, 1)),
            "n_group must divide num_experts (6 % 4 != 0)"));
  CHECK(has(refusal("topk_group", groups(3, 4)),
            "topk_group must be between 1 and n_group"));
  CHECK(has(refusal("scoring", [](auto& j, auto&) { j["scoring_func"] = 1; }),
            "scoring_func must be softmax or sigmoid"));
  // Mixtral's name for a Qwen3-MoE tensor.
  const auto mixtral = "model.layers.0.block_sparse_moe.gate.weight";
  CHECK(has(refusal("mixtral_name",
                    [&](auto&, auto& t) {
                      auto n = t.extract("model.layers.0.mlp.gate.weight");
                      n.key() = mixtral;
                      n.mapped().name = mixtral;
                      t.insert(std::move(n));
                    }),
            std::string("tensor ") + mixtral + " is not a qwen3_moe tensor"));
}

TEST_CASE("the sigmoid router's keys go through a checkpoint header and "
          "config.json",
          "[unit]") {
  const auto cfg = sigmoid_config();
  store::shard_meta meta;
  model::record_shape(cfg.model, cfg.moe, meta.ints, meta.strings);
  const auto dir = scratch("qwen3_moe_sigmoid_keys");
  fs::create_directories(dir);
  write_text(dir / "config.json", model::hf_config_text(meta));
  const auto read = model::read_hf_config(dir / "config.json");
  INFO(read.message());
  REQUIRE(read.ok());
  for (const auto& shape : {model::shape_of(meta), read.value()}) {
    CHECK(shape.scoring == scoring_func::sigmoid);
    CHECK(shape.n_group == 3);
    CHECK(shape.topk_group == 2);
    CHECK(shape.routed_scaling_factor == 2.5);
  }
}
