// Multi-head latent attention (DeepSeek-V3's MLA) end to end: a tiny random
// checkpoint with DeepseekV3Attention's tensors and keys gives, in tutti's
// training forward and in the serving engine over the latent KV cache
// (prefill, and absorbed decode step by step), the logits of an
// independent float64 forward (mla_reference.hpp) within float32 rounding
// and the same greedy tokens; with and without a query latent, with
// interleaved and paired rotary slices. Served, a request's tokens and
// log-probabilities are the same bits one at a time and eight at once, on
// the engine and on 1 and 2 expert-parallel ranks; a position costs
// (kv_lora_rank + qk_rope_head_dim) values per layer. A DeepSeek-V3
// checkpoint's multi-token-prediction layer is skipped. Bad keys and
// tensors are refused in one line naming them.

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>

#include "mla_reference.hpp"
#include "serve_requests.hpp"
#include "serve_test_support.hpp"
#include "training_forward.hpp"
#include "tutti/model/family.hpp"
#include "tutti/model/hf_config.hpp"
#include "tutti/model/model_shape.hpp"
#include "tutti/model/weights.hpp"
#include "tutti/serve/engine.hpp"
#include "tutti/serve/expert_loading.hpp"
#include "tutti/serve/kv_cache.hpp"
#include "tutti/serve/sampler.hpp"
#include "tutti/serve/service.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;
namespace names = tutti::model::names;

namespace {

// Width 24, 4 heads: queries and keys of 6 + 4, values of 5; a latent of
// 12. 6 experts, top-2.
constexpr int V = 40, D = 24, F = 16, L = 2, H = 4, E = 6, K = 2, P = 12;
constexpr int KVL = 12, NOPE = 6, ROPE = 4, VD = 5;

std::string mla_keys(int q_lora_rank, bool interleave) {
  return "  kv_lora_rank: " + std::to_string(KVL)
         + "\n  q_lora_rank: " + std::to_string(q_lora_rank)
         + "\n  qk_nope_head_dim: " + std::to_string(NOPE)
         + "\n  qk_rope_head_dim: " + std::to_string(ROPE)
         + "\n  v_head_dim: " + std::to_string(VD)
         + "\n  rope_interleave: " + (interleave ? "true" : "false") + "\n";
}

job_config mla_config(int q_lora_rank, bool interleave, int vocab = V,
                      int max_seq = P) {
  return serve_test_config(vocab, D, F, L, H, H, E, K, max_seq,
                           mla_keys(q_lora_rank, interleave));
}

// The reference over the tensors by their Hugging Face names, the MoE's
// under qwen3_reference's (mlp.gate, mlp.experts.E.gate_proj ...).
mla_reference reference_of(const job_config& cfg, const tensor_map& t) {
  mla_reference r;
  r.base = {V,
            D,
            F,
            L,
            H,
            H,
            0,
            E,
            K,
            cfg.moe.norm_topk_prob,
            cfg.model.rope_theta,
            cfg.model.rms_norm_eps,
            {}};
  for (const auto& [name, values] : t)
    if (name.find("e_score_correction_bias") == std::string::npos)
      r.base.w[model::hf_tensor_name(model_family::qwen3_moe, name)].assign(
        values.begin(), values.end());
  const auto& m = cfg.model;
  r.q_lora_rank = m.q_lora_rank;
  r.kv_lora_rank = m.kv_lora_rank;
  r.nope = m.qk_nope_head_dim;
  r.rope = m.qk_rope_head_dim;
  r.v = m.v_head_dim;
  r.interleave = m.rope_interleave;
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

// The worst difference of log-probabilities, relative to max(1, |ref|).
double worst(const std::vector<double>& got, const std::vector<double>& ref) {
  double w = 0;
  for (size_t j = 0; j < ref.size(); ++j)
    w = std::max(w,
                 std::abs(got[j] - ref[j]) / std::max(1.0, std::abs(ref[j])));
  return w;
}

serve::served_model load_or_fail(const fs::path& dir) {
  auto m = serve::load_model(dir);
  INFO(m.message());
  REQUIRE(m.ok());
  return std::move(m.value());
}

} // namespace

TEST_CASE("MLA: tutti's logits are the reference's, trained and served over "
          "the latent cache",
          "[unit]") {
  const int q_lora_rank = GENERATE(0, 10);
  const bool interleave = GENERATE(false, true);
  INFO("q_lora_rank " << q_lora_rank << ", rope_interleave " << interleave);
  const auto cfg = mla_config(q_lora_rank, interleave);
  const auto dir = scratch("mla_" + std::to_string(q_lora_rank)
                           + (interleave ? "_interleave" : ""))
                   / "hf";
  auto tensors = random_model_tensors(cfg, 31);
  for (int64_t l = 0; l < L; ++l) {
    tensors.erase(names::layer(l, names::router_bias));
    // The latents' norms away from their initial ones, so they matter.
    for (const char* norm : {names::q_a_norm, names::kv_a_norm})
      if (auto it = tensors.find(names::layer(l, norm)); it != tensors.end())
        for (size_t i = 0; i < it->second.size(); ++i)
          it->second[i] += 0.3f * std::sin(float(i + 7 * l));
  }
  write_export_dir(dir, cfg, tensors);
  const auto ref = reference_of(cfg, tensors);
  const auto prompt = random_prompt(9, P, V);
  const auto want = ref.logits(prompt);

  const auto m = load_or_fail(dir);
  CHECK(m.shape.mla());
  CHECK(m.shape.q_lora_rank == q_lora_rank);
  CHECK(m.shape.rope_interleave == interleave);
  const auto g = serve::geometry_of_shape(m.shape, 4);
  // A position: its latent and rotated key per layer, for all heads.
  CHECK(g.token_bytes() == (KVL + ROPE) * L * 4);

  SECTION("serving: prefill of the whole prompt") {
    serve::kv_cache cache(g, 8);
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
  SECTION("serving: greedy decode token by token over the latent cache") {
    serve::kv_cache cache(g, 8);
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
      const auto r = ref.logits(seq).back();
      w = std::max(w,
                   worst(serve::log_softmax(logits.data(), V), log_softmax(r)));
      const auto next = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
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

TEST_CASE("DeepSeek-V3: a DeepseekV3ForCausalLM directory gives the "
          "reference's logits, trained and served",
          "[unit]") {
  // MLA with a query latent and interleaved rotary slices, a leading dense
  // layer, a shared expert, the group-limited sigmoid router.
  const auto cfg = deepseek_test_config(V, P);
  const auto dir = scratch("deepseek_v3") / "hf";
  auto tensors = random_model_tensors(cfg, 37);
  // Correction biases that change the choice of experts.
  const auto bias = names::layer(1, names::router_bias);
  tensors[bias] = {0.3f, -0.2f, 0.1f, 0.0f, -0.4f, 0.2f};
  write_export_dir(dir, cfg, tensors);
  const auto text = read_text(dir / "config.json");
  CHECK(text.find("\"DeepseekV3ForCausalLM\"") != std::string::npos);
  CHECK(text.find("\"n_routed_experts\"") != std::string::npos);

  auto ref = reference_of(cfg, tensors);
  ref.base.w[model::hf_tensor_name(model_family::qwen3_moe, bias)].assign(
    tensors[bias].begin(), tensors[bias].end());
  ref.base.sigmoid_router = qwen3_reference::deepseek_router{2, 1, 2.5};
  ref.base.n_shared_experts = 1;
  ref.base.first_k_dense_replace = 1;
  ref.base.dense_inter = 20;
  const auto prompt = random_prompt(13, P, V);
  const auto want = ref.logits(prompt);

  const auto m = load_or_fail(dir);
  CHECK(m.shape.family == model_family::deepseek_v3);
  CHECK(m.shape.dense_layers == 1);
  CHECK(m.shape.shared_experts == 1);
  serve::kv_cache cache(serve::geometry_of_shape(m.shape, 4), 8);
  serve::engine engine(m, cache);
  std::vector<int32_t> blocks;
  REQUIRE(cache.reserve(blocks, P));
  std::vector<float> logits;
  REQUIRE(
    engine
      .forward({{prompt.data(), P, 0, &blocks, serve::seq_chunk::logits::all}},
               logits)
      .ok());
  const auto trained = training_logprobs(cfg, tensors, prompt);
  double served = 0, train = 0;
  for (int64_t p = 0; p < P; ++p) {
    served = std::max(served,
                      worst(serve::log_softmax(logits.data() + p * V, V),
                            log_softmax(want[p])));
    train = std::max(train, worst(trained[p], log_softmax(want[p])));
  }
  INFO("worst relative difference: served " << served << ", trained " << train);
  CHECK(served < 1e-5);
  CHECK(train < 1e-5);
}

namespace {

// The logits of `m` at every position of `prompt` (P tokens).
std::vector<float> served_logits(const serve::served_model& m,
                                 const std::vector<int32_t>& prompt) {
  serve::kv_cache cache(serve::geometry_of_shape(m.shape, 4), 8);
  serve::engine engine(m, cache);
  std::vector<int32_t> blocks;
  REQUIRE(cache.reserve(blocks, P));
  std::vector<float> logits;
  REQUIRE(
    engine
      .forward({{prompt.data(), P, 0, &blocks, serve::seq_chunk::logits::all}},
               logits)
      .ok());
  return logits;
}

// config.json (cfg's, with `keys` added) and model.safetensors holding
// `tensors` as they are named.
fs::path write_hf_dir(const std::string& name, const job_config& cfg,
                      const nlohmann::json& keys,
                      const std::vector<store::named_tensor>& tensors) {
  const auto dir = scratch("mla_mtp_" + name) / "hf";
  fs::create_directories(dir);
  auto j = hf_config_json(cfg);
  if (keys.is_object())
    j.update(keys);
  write_text(dir / "config.json", j.dump(2));
  REQUIRE(store::write_safetensors(dir / "model.safetensors", tensors).ok());
  return dir;
}

} // namespace

TEST_CASE("DeepSeek-V3: a multi-token-prediction layer is skipped, another "
          "unexpected tensor refused",
          "[unit]") {
  // A checkpoint with num_nextn_predict_layers: 1 holds model.layers.2.*
  // (of 2 layers): the module's own tensors and a whole MoE decoder layer.
  const auto cfg = deepseek_test_config(V, P);
  const auto tensors = random_model_tensors(cfg, 43);
  std::vector<store::named_tensor> main, mtp;
  const std::string last = "model.layers.1.";
  for (const auto& [name, values] : tensors) {
    const auto hf = model::hf_tensor_name(model_family::deepseek_v3, name);
    main.push_back({hf, hf_shape(cfg, name), values});
    if (hf.rfind(last, 0) == 0)
      mtp.push_back({"model.layers.2." + hf.substr(last.size()),
                     hf_shape(cfg, name), values});
  }
  const std::pair<const char*, std::vector<int64_t>> module[] = {
    {"embed_tokens.weight", {V, D}},
    {"enorm.weight", {D}},
    {"hnorm.weight", {D}},
    {"eh_proj.weight", {D, 2 * D}},
    {"shared_head.norm.weight", {D}},
    {"shared_head.head.weight", {V, D}}};
  for (const auto& [part, shape] : module) {
    int64_t n = 1;
    for (auto d : shape)
      n *= d;
    mtp.push_back({"model.layers.2." + std::string(part), shape,
                   std::vector<float>(n, 0.25f)});
  }
  CHECK(mtp.size() > 20);
  auto with = main;
  with.insert(with.end(), mtp.begin(), mtp.end());
  const nlohmann::json nextn = {{"num_nextn_predict_layers", 1}};

  const auto prompt = random_prompt(17, P, V);
  const auto want = served_logits(
    load_or_fail(write_hf_dir("none", cfg, {}, main)), prompt);
  const auto dir = write_hf_dir("one", cfg, nextn, with);
  const auto read = model::load_weights(dir);
  REQUIRE(read.ok());
  CHECK(read.value().skipped_mtp_tensors == int64_t(mtp.size()));
  CHECK(read.value().shape.mtp_layers == 1);
  // Loaded whole, and one tensor at a time as a serving daemon loads.
  const auto whole = load_or_fail(dir);
  CHECK(whole.skipped_mtp_tensors == int64_t(mtp.size()));
  CHECK(served_logits(whole, prompt) == want);
  auto part = serve::load_model_part(dir, serve::expert_set(L * E, 1),
                                     weight_dtype::fp32);
  INFO(part.message());
  REQUIRE(part.ok());
  CHECK(part.value().skipped_mtp_tensors == int64_t(mtp.size()));
  CHECK(served_logits(part.value(), prompt) == want);

  auto refused = [&](const std::string& name, const nlohmann::json& keys,
                     const std::vector<store::named_tensor>& t) {
    const auto bad = write_hf_dir(name, cfg, keys, t);
    std::vector<std::string> out;
    auto whole = serve::load_model(bad);
    auto streamed = serve::load_model_part(bad, serve::expert_set(L * E, 1),
                                           weight_dtype::fp32);
    for (const status& s : {whole.error(), streamed.error()}) {
      REQUIRE_FALSE(s.ok());
      CHECK(s.message().find('\n') == std::string::npos);
      out.push_back(s.message());
    }
    return out;
  };
  // Without the key the module's tensors are unexpected.
  for (const auto& m : refused("no_key", {}, with)) {
    INFO(m);
    CHECK(m.find("model.layers.2.") != std::string::npos);
  }
  // A layer past the declared ones, and a stray tensor, still are.
  auto past = with;
  past.push_back({"model.layers.3.enorm.weight", {D}, std::vector<float>(D)});
  for (const auto& m : refused("past", nextn, past)) {
    INFO(m);
    CHECK(m.find("model.layers.3.enorm.weight") != std::string::npos);
  }
  auto stray = with;
  stray.push_back({"model.layers.0.stray.weight", {D}, std::vector<float>(D)});
  for (const auto& m : refused("stray", nextn, stray)) {
    INFO(m);
    CHECK(m.find("model.layers.0.stray.weight") != std::string::npos);
  }
}

namespace {

serve::served_model mla_served_model() {
  return random_served_model("serve_mla_model", mla_config(10, true, 64, 96),
                             41);
}

// The jobs served on `ranks` ranks (0: the engine alone), all at once or
// one after another.
std::vector<served_outcome> serve_mla(int64_t ranks, bool all_at_once,
                                      const std::vector<served_job>& js) {
  auto svc = serve::service::create(mla_served_model(), ep_limits(ranks));
  REQUIRE(svc.ok());
  auto& s = *svc.value();
  s.start();
  // A position: the latent and the rotated key in each of the 2 layers.
  const auto metrics = s.metrics().render("m");
  const auto bytes = std::to_string((KVL + ROPE) * L * 4);
  CHECK(metrics.find("tutti_serve_kv_cache_bytes_per_token{model=\"m\"} "
                     + bytes + "\n")
        != std::string::npos);
  std::vector<served_outcome> out;
  if (all_at_once) {
    out = serve_all_jobs(s, js);
  } else {
    for (const auto& j : js)
      out.push_back(serve_all_jobs(s, {j}).front());
  }
  s.stop();
  return out;
}

} // namespace

TEST_CASE("MLA: the same bits at concurrency 1 and 8, on the engine and at "
          "EP 1 and 2",
          "[unit]") {
  const auto js = served_jobs(8);
  const auto alone = serve_mla(0, false, js);
  for (const auto& o : alone)
    CHECK(!o.tokens.empty());
  check_same_outcomes(serve_mla(0, true, js), alone, js);
  check_same_outcomes(serve_mla(1, true, js), alone, js);
  check_same_outcomes(serve_mla(2, true, js), alone, js);
  check_same_outcomes(serve_mla(2, false, js), alone, js);
}

TEST_CASE("MLA keys: a latent cache row per position, and refusals naming "
          "the key",
          "[unit]") {
  const auto cfg = mla_config(10, true);
  const auto shape = model::shape_of(cfg.model, cfg.moe);
  const auto mla = serve::geometry_of_shape(shape, 16);
  auto gqa_cfg = serve_test_config(V, D, F, L, H, H, E, K, P);
  const auto gqa = serve::geometry_of_shape(
    model::shape_of(gqa_cfg.model, gqa_cfg.moe), 16);
  CHECK(mla.token_bytes() == (KVL + ROPE) * L * 4);
  CHECK(gqa.token_bytes() == 2 * H * (D / H) * L * 4);

  // The keys through a checkpoint header and config.json; a header
  // without them is grouped-query attention.
  store::shard_meta meta;
  model::record_shape(cfg.model, cfg.moe, meta.ints, meta.strings);
  const auto dir = scratch("mla_keys");
  fs::create_directories(dir);
  write_text(dir / "config.json", model::hf_config_text(meta));
  const auto read = model::read_hf_config(dir / "config.json");
  INFO(read.message());
  REQUIRE(read.ok());
  for (const auto& s : {model::shape_of(meta), read.value()}) {
    CHECK(s.q_lora_rank == 10);
    CHECK(s.kv_lora_rank == KVL);
    CHECK(s.qk_nope_head_dim == NOPE);
    CHECK(s.qk_rope_head_dim == ROPE);
    CHECK(s.v_head_dim == VD);
    CHECK(s.rope_interleave);
  }
  store::shard_meta old;
  model::record_shape(gqa_cfg.model, gqa_cfg.moe, old.ints, old.strings);
  CHECK(!old.ints.count("kv_lora_rank"));
  CHECK(!model::shape_of(old).mla());

  auto refusal = [](const std::string& keys) {
    std::ostringstream c;
    c << "cluster_config:\n  world_size: 1\n  nnodes: 1\n  nproc_per_node: "
         "1\n  ep_size: 1\nmodel:\n"
      << keys
      << "  vocab_size: 40\n  hidden_size: 24\n  intermediate_size: 16\n"
         "  num_hidden_layers: 2\n  num_attention_heads: 4\n"
         "  max_seq_len: 12\nmoe_config:\n  num_experts: 6\n"
         "  router_top_k: 2\ntrain:\n  steps: 1\n  global_batch_size: 1\n"
         "  seq_len: 12\ndata:\n  dir: x\nrun:\n  dir: x\n";
    auto parsed = parse_job_config(c.str(), "test");
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.message().find('\n') == std::string::npos);
    return parsed.message();
  };
  const std::string base = "  kv_lora_rank: 12\n  qk_nope_head_dim: 6\n"
                           "  v_head_dim: 5\n";
  auto has = [](const std::string& s, const std::string& part) {
    INFO(s);
    return s.find(part) != std::string::npos;
  };
  CHECK(has(refusal(base + "  qk_rope_head_dim: 3\n  num_key_value_heads: 4\n"),
            "model.qk_rope_head_dim"));
  CHECK(has(refusal(base + "  qk_rope_head_dim: 4\n  num_key_value_heads: 2\n"),
            "model.num_key_value_heads"));
  CHECK(has(refusal(base
                    + "  qk_rope_head_dim: 4\n  num_key_value_heads: 4\n"
                      "  family: qwen3_moe\n  head_dim: 6\n"),
            "model."));
  CHECK(has(refusal("  qk_rope_head_dim: 4\n  num_key_value_heads: 4\n"),
            "model.kv_lora_rank"));
  CHECK(has(refusal("  kv_lora_rank: 12\n  qk_nope_head_dim: 6\n"
                    "  qk_rope_head_dim: 4\n  v_head_dim: 11\n"
                    "  num_key_value_heads: 4\n"),
            "model.v_head_dim"));
}

TEST_CASE("MLA checkpoints: a missing or mis-shaped tensor refused naming "
          "it; DeepSeek-V3's attention names",
          "[unit]") {
  const auto cfg = mla_config(10, true);
  auto load = [&](const std::string& name,
                  const std::function<void(
                    std::map<std::string, store::named_tensor>&)>& spoil) {
    std::map<std::string, store::named_tensor> t;
    for (const auto& [n, values] : random_model_tensors(cfg, 32))
      if (n.find("e_score_correction_bias") == std::string::npos)
        t[n] = {n, hf_shape(cfg, n), values};
    spoil(t);
    const auto dir = scratch("mla_bad_" + name) / "hf";
    fs::create_directories(dir);
    write_text(dir / "config.json", hf_config_json(cfg).dump(2));
    std::vector<store::named_tensor> tensors;
    for (const auto& [n, tensor] : t)
      tensors.push_back(tensor);
    REQUIRE(store::write_safetensors(dir / "model.safetensors", tensors).ok());
    auto m = serve::load_model(dir);
    REQUIRE_FALSE(m.ok());
    CHECK(m.message().find('\n') == std::string::npos);
    return m.message();
  };
  const auto kv_b = names::layer(1, names::kv_b_proj);
  const auto q_a = names::layer(0, names::q_a_proj);
  auto missing = load("missing", [&](auto& t) { t.erase(kv_b); });
  INFO(missing);
  CHECK(missing.find("tensor " + kv_b + " missing") != std::string::npos);
  auto shaped = load("shape", [&](auto& t) {
    t[q_a].shape = {11, D};
    t[q_a].data.resize(11 * D);
  });
  INFO(shaped);
  CHECK(shaped.find("tensor " + q_a + " has shape [11,24], expected [10,24]")
        != std::string::npos);

  // DeepSeek-V3's checkpoints name the attention tensors as tutti does.
  for (const char* part :
       {names::q_proj, names::q_a_proj, names::q_a_norm, names::q_b_proj,
        names::kv_a_proj, names::kv_a_norm, names::kv_b_proj, names::o_proj}) {
    const auto tutti_name = names::layer(3, part);
    const auto hf = model::hf_tensor_name(model_family::deepseek_v3,
                                          tutti_name);
    CHECK(hf == "model.layers.3." + std::string(part));
    CHECK(model::tutti_tensor_name(model_family::deepseek_v3, hf)
          == tutti_name);
  }
  CHECK(std::string(names::kv_a_proj) == "self_attn.kv_a_proj_with_mqa.weight");
}
