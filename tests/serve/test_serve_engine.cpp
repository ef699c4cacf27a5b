// The serving forward: served logits equal the training forward's
// (rank_model) for the same weights and tokens; decoding over the paged KV
// cache equals recomputing the whole sequence; the model loads the same
// from a `tutti export` directory and from a tutti checkpoint; bad model
// directories are refused naming the file or key.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "serve_test_support.hpp"
#include "training_forward.hpp"
#include "tutti/serve/engine.hpp"
#include "tutti/kernels/invariant_ops.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/serve/kv_cache.hpp"
#include "tutti/serve/sampler.hpp"
#include "tutti/serve/expert_loading.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/gguf.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

serve::served_model load_or_fail(const fs::path& dir) {
  auto m = serve::load_model(dir);
  INFO(m.message());
  REQUIRE(m.ok());
  return std::move(m.value());
}

serve::kv_geometry geometry(const serve::served_model& m, int64_t bt) {
  return {m.shape.layers, m.shape.kv_heads, m.shape.head_dim, bt};
}

bool close(float a, float b, double rel) {
  return std::abs(double(a) - double(b))
         <= rel * std::max(1.0, std::abs(double(b)));
}

} // namespace

TEST_CASE("served logits equal the training forward's", "[unit]") {
  auto cfg = serve_test_config(32, 32, 64, 2, 4, 2, 4, 2, 16);
  auto tensors = random_model_tensors(cfg, 11);
  auto dir = scratch("serve_engine_logits") / "export";
  write_export_dir(dir, cfg, tensors);
  auto model = load_or_fail(dir);
  CHECK(model.shape.head_dim == 8);

  const auto tokens = random_prompt(5, 16, 32);
  serve::kv_cache cache(geometry(model, 4), 8);
  serve::engine engine(model, cache);
  std::vector<int32_t> blocks;
  REQUIRE(cache.reserve(blocks, 16));
  serve::seq_chunk c{tokens.data(), 16, 0, &blocks,
                     serve::seq_chunk::logits::all};
  std::vector<float> logits;
  REQUIRE(engine.forward({c}, logits).ok());
  REQUIRE(logits.size() == 16 * 32);

  const auto reference = training_logprobs(cfg, tensors, tokens);
  double worst = 0;
  for (int64_t p = 0; p < 16; ++p) {
    const auto served = serve::log_softmax(logits.data() + p * 32, 32);
    for (int64_t j = 0; j < 32; ++j)
      worst = std::max(worst, std::abs(served[j] - reference[p][j])
                                / std::max(1.0, std::abs(reference[p][j])));
  }
  INFO("worst relative difference " << worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("KV-cached decoding equals full recomputation, in any batch",
          "[unit]") {
  auto cfg = serve_test_config(32, 32, 64, 2, 4, 2, 4, 2, 24);
  // Also DeepSeek-V3's router: two groups of two experts, one kept; and its
  // feed-forward side: a dense first layer, a shared expert in the second.
  const int variant = GENERATE(0, 1, 2);
  const bool sigmoid = variant == 1;
  if (sigmoid) {
    cfg.moe.scoring = scoring_func::sigmoid;
    cfg.moe.n_group = 2;
    cfg.moe.topk_group = 1;
    cfg.moe.routed_scaling_factor = 2.0;
  }
  if (variant == 2) {
    cfg.moe.n_shared_experts = 1;
    cfg.moe.first_k_dense_replace = 1;
    cfg.model.dense_intermediate_size = 48;
  }
  auto tensors = random_model_tensors(cfg, 12);
  const char* names[] = {"serve_engine_kv", "serve_engine_kv_sigmoid",
                         "serve_engine_kv_feed_forward"};
  auto dir = scratch(names[variant]) / "export";
  write_export_dir(dir, cfg, tensors);
  auto model = load_or_fail(dir);
  const auto tokens = random_prompt(6, 20, 32);
  const auto other = random_prompt(7, 20, 32);

  // Full recomputation: the whole sequence in one chunk.
  std::vector<float> full;
  {
    serve::kv_cache cache(geometry(model, 4), 16);
    serve::engine e(model, cache);
    std::vector<int32_t> blocks;
    REQUIRE(cache.reserve(blocks, 20));
    REQUIRE(
      e.forward(
         {{tokens.data(), 20, 0, &blocks, serve::seq_chunk::logits::all}}, full)
        .ok());
  }
  // Chunked prefill of 5 + 3 tokens, then one token per step, each step
  // batched with another sequence at a different position.
  serve::kv_cache cache(geometry(model, 4), 16);
  serve::engine e(model, cache);
  std::vector<int32_t> blocks, other_blocks;
  REQUIRE(cache.reserve(other_blocks, 20));
  std::vector<float> got, step;
  int64_t pos = 0, other_pos = 0;
  auto run = [&](int64_t n) {
    REQUIRE(cache.reserve(blocks, pos + n));
    std::vector<serve::seq_chunk> batch;
    if (other_pos < 20)
      batch.push_back({other.data() + other_pos, 1, other_pos, &other_blocks,
                       serve::seq_chunk::logits::last});
    batch.push_back(
      {tokens.data() + pos, n, pos, &blocks, serve::seq_chunk::logits::all});
    REQUIRE(e.forward(batch, step).ok());
    const size_t skip = other_pos < 20 ? 32 : 0;
    got.insert(got.end(), step.begin() + skip, step.end());
    pos += n;
    ++other_pos;
  };
  run(5);
  run(3);
  while (pos < 20)
    run(1);
  REQUIRE(got.size() == full.size());
  if (sigmoid)
    CHECK(model.shape.scoring == scoring_func::sigmoid);
  size_t identical = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    CHECK(close(got[i], full[i], 1e-5));
    identical += got[i] == full[i];
  }
  // Every row is computed on its own: the same bits, not only close.
  CHECK(identical == full.size());
}

TEST_CASE("a tutti checkpoint loads as the same model", "[unit]") {
  auto cfg = serve_test_config(32, 32, 64, 2, 4, 2, 4, 2, 16);
  auto tensors = random_model_tensors(cfg, 13);
  auto root = scratch("serve_engine_ckpt");
  write_export_dir(root / "export", cfg, tensors);

  // One rank's shard as the checkpoint writer lays it out: dense tensors,
  // router_bias [layers, experts], expert blocks [experts, out, in].
  const auto& m = cfg.model;
  const int64_t E = cfg.moe.num_experts, L = m.num_hidden_layers;
  std::vector<store::tensor_view> views;
  std::vector<std::vector<float>> keep;
  const auto dense = model::dense_layout(m, cfg.moe);
  for (const auto& t : dense.tensors())
    views.push_back({t.name, t.shape, tensors.at(t.name).data()});
  keep.reserve(1 + 3 * L); // the views point into these
  auto& bias = keep.emplace_back();
  for (int64_t l = 0; l < L; ++l) {
    const auto& b = tensors.at("model.layers." + std::to_string(l)
                               + ".block_sparse_moe.gate."
                                 "e_score_correction_bias");
    bias.insert(bias.end(), b.begin(), b.end());
  }
  views.push_back({"router_bias", {L, E}, bias.data()});
  for (int64_t l = 0; l < L; ++l)
    for (const char* w : {"w1", "w3", "w2"}) {
      auto& block = keep.emplace_back();
      for (int64_t e = 0; e < E; ++e) {
        const auto& v = tensors.at("model.layers." + std::to_string(l)
                                   + ".block_sparse_moe.experts."
                                   + std::to_string(e) + "." + w + ".weight");
        block.insert(block.end(), v.begin(), v.end());
      }
      const bool down = std::string(w) == "w2";
      views.push_back({model::expert_block_name(l, w),
                       {E, down ? m.hidden_size : m.intermediate_size,
                        down ? m.intermediate_size : m.hidden_size},
                       block.data()});
    }
  store::shard_meta meta;
  meta.step = 3;
  meta.ints = {{"vocab_size", m.vocab_size},
               {"hidden_size", m.hidden_size},
               {"intermediate_size", m.intermediate_size},
               {"num_hidden_layers", L},
               {"num_attention_heads", m.num_attention_heads},
               {"num_key_value_heads", m.num_key_value_heads},
               {"max_seq_len", m.max_seq_len},
               {"num_experts", E},
               {"router_top_k", cfg.moe.router_top_k},
               {"first_expert", 0}};
  meta.strings = {{"rope_theta", std::to_string(m.rope_theta)},
                  {"rms_norm_eps", std::to_string(m.rms_norm_eps)},
                  {"router_temperature", "1.000000"}};
  const auto ckpt = root / store::checkpoint_dir_name(3);
  const auto shard = ckpt / store::shard_file_name(0);
  REQUIRE(store::write_shard_file(shard, meta, views).ok());
  auto entry = store::describe_shard(shard);
  REQUIRE(entry.ok());
  REQUIRE(store::write_manifest(ckpt, {3, 0, 1, {entry.value()}}).ok());

  auto from_export = load_or_fail(root / "export");
  auto from_ckpt = load_or_fail(ckpt);
  const auto tokens = random_prompt(8, 12, 32);
  auto logits_of = [&](const serve::served_model& model) {
    serve::kv_cache cache(geometry(model, 4), 4);
    serve::engine e(model, cache);
    std::vector<int32_t> blocks;
    REQUIRE(cache.reserve(blocks, 12));
    std::vector<float> out;
    REQUIRE(
      e.forward(
         {{tokens.data(), 12, 0, &blocks, serve::seq_chunk::logits::all}}, out)
        .ok());
    return out;
  };
  CHECK(logits_of(from_export) == logits_of(from_ckpt));

  // A daemon's part (expert_loading.hpp), read shard by shard: with every
  // expert the same logits; with half of them, those alone packed, the
  // same packing.
  auto part = serve::load_model_part(ckpt, serve::expert_set(L * E, 1),
                                     weight_dtype::fp32);
  REQUIRE(part.ok());
  CHECK(logits_of(part.value()) == logits_of(from_export));
  serve::expert_set half(L * E, 0);
  for (int64_t i = 0; i < L * E; i += 2)
    half[i] = 1;
  auto some = serve::load_model_part(ckpt, half, weight_dtype::fp32);
  REQUIRE(some.ok());
  for (int64_t l = 0; l < L; ++l)
    for (int64_t e = 0; e < E; ++e) {
      const auto& got = some.value().layers[l];
      CHECK(some.value().holds_expert(l, e) == (half[l * E + e] != 0));
      CHECK((got.w13_t[e].out > 0) == (half[l * E + e] != 0));
      if (half[l * E + e])
        CHECK((got.w13_t[e].t == from_ckpt.layers[l].w13_t[e].t
               && got.w2_t[e].t == from_ckpt.layers[l].w2_t[e].t));
    }

  // A part read with serve.weight_dtype bf16 holds its experts in
  // bfloat16, the same logits as the whole model converted at load.
  auto bf16_part = serve::load_model_part(ckpt, serve::expert_set(L * E, 1),
                                          weight_dtype::bf16);
  REQUIRE(bf16_part.ok());
  CHECK(bf16_part.value().expert_dtype == weight_dtype::bf16);
  CHECK(bf16_part.value().quantized_at_load);
  CHECK(bf16_part.value().layers[0].w2_t[0].is_bf16());
  auto whole_bf16 = load_or_fail(ckpt);
  serve::quantize_experts(whole_bf16, weight_dtype::bf16);
  CHECK(logits_of(bf16_part.value()) == logits_of(whole_bf16));
  CHECK(logits_of(whole_bf16) != logits_of(from_export));
}

TEST_CASE("bad model directories are refused naming the file or key",
          "[unit]") {
  auto cfg = serve_test_config(32, 32, 64, 1, 4, 2, 4, 2, 16);
  auto tensors = random_model_tensors(cfg, 14);
  auto root = scratch("serve_engine_bad");
  auto expect = [&](const fs::path& dir, const std::string& named) {
    auto m = serve::load_model(dir);
    INFO(m.message());
    REQUIRE_FALSE(m.ok());
    CHECK(m.message().find(named) != std::string::npos);
    CHECK(m.message().find('\n') == std::string::npos);
  };
  expect(root / "absent", "not a directory");
  fs::create_directories(root / "empty");
  expect(root / "empty", "neither a model directory");

  write_export_dir(root / "no_key", cfg, tensors);
  auto j = nlohmann::json::parse(read_text(root / "no_key" / "config.json"));
  j.erase("num_local_experts");
  write_text(root / "no_key" / "config.json", j.dump());
  expect(root / "no_key", "num_local_experts");

  auto missing = tensors;
  missing.erase("model.layers.0.self_attn.k_proj.weight");
  write_export_dir(root / "no_tensor", cfg, missing);
  expect(root / "no_tensor", "model.layers.0.self_attn.k_proj.weight");

  write_export_dir(root / "torn", cfg, tensors);
  auto bytes = read_text(root / "torn" / "model.safetensors");
  write_text(root / "torn" / "model.safetensors",
             bytes.substr(0, bytes.size() / 2));
  expect(root / "torn", "model.safetensors");

  write_export_dir(root / "index", cfg, tensors);
  write_text(root / "index" / "model.safetensors.index.json",
             R"({"weight_map": {"lm_head.weight": "../x.safetensors"}})");
  expect(root / "index", "model.safetensors.index.json");
}

TEST_CASE("the KV cache hands out blocks all or nothing", "[unit]") {
  serve::kv_geometry g{2, 2, 4, 4};
  CHECK(g.block_bytes() == 2 * 2 * 4 * 2 * 4 * 4);
  CHECK(serve::kv_cache::blocks_for_budget(g, 10 * g.block_bytes() + 5) == 10);
  serve::kv_cache cache(g, 3);
  std::vector<int32_t> a, b;
  CHECK(cache.reserve(a, 9)); // 3 blocks
  CHECK(cache.free_blocks() == 0);
  CHECK_FALSE(cache.reserve(b, 1));
  CHECK(b.empty());
  CHECK(cache.reserve(a, 12)); // still 3 blocks
  cache.release(a);
  CHECK(a.empty());
  CHECK(cache.free_blocks() == 3);
  CHECK(cache.reserve(b, 5));
  CHECK(b.size() == 2);
  CHECK(cache.used_blocks() == 2);
}

TEST_CASE("kernels::packed_gemm and invariant_linear_forward give every row "
          "the bits of its left-to-right chain of fused multiply-adds, "
          "alone or in any batch",
          "[unit]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  // Widths through every path: groups of 64 and 16 outputs and the tail;
  // row counts through blocks of 4 and single rows.
  for (int64_t k : {1, 7, 8, 29, 256})
    for (int64_t n : {8, 23, 64, 100, 144}) {
      const int64_t m = 9;
      std::vector<float> x(m * k), w(n * k), y(m * n), one(n);
      for (auto& v : x)
        v = u(rng);
      for (auto& v : w)
        v = u(rng);
      const auto packed = kernels::pack_matrix(w.data(), n, k);
      kernels::packed_gemm(x.data(), packed, y.data(), m);
      // The routed op (the one test_cuda_kernels holds CUDA's kernel to):
      // the same bits on the CPU, in float and in double.
      std::vector<float> routed(m * n);
      kernels::invariant_linear_forward(kernels::cpu_stream(), x.data(), k,
                                        packed.t.data(), routed.data(), n, m,
                                        k, n);
      const std::vector<double> xd(x.begin(), x.end()),
        wtd(packed.t.begin(), packed.t.end());
      std::vector<double> yd(m * n), oned(n);
      kernels::invariant_linear_forward(kernels::cpu_stream(), xd.data(), k,
                                        wtd.data(), yd.data(), n, m, k, n);
      for (int64_t i = 0; i < m; ++i) {
        kernels::packed_gemm(x.data() + i * k, packed, one.data(), 1);
        kernels::invariant_linear_forward(kernels::cpu_stream(),
                                          xd.data() + i * k, k, wtd.data(),
                                          oned.data(), n, 1, k, n);
        for (int64_t j = 0; j < n; ++j) {
          float sum = 0.0f; // the chain of fused multiply-adds
          double sumd = 0.0;
          for (int64_t t = 0; t < k; ++t) {
            sum = std::fma(x[i * k + t], w[j * k + t], sum);
            sumd = std::fma(xd[i * k + t], double(w[j * k + t]), sumd);
          }
          CHECK(y[i * n + j] == one[j]);
          CHECK(y[i * n + j] == sum);
          CHECK(routed[i * n + j] == sum);
          CHECK(yd[i * n + j] == oned[j]);
          CHECK(yd[i * n + j] == sumd);
        }
      }
    }
}

namespace {

// A safetensors file with each tensor in the dtype `dtype_of` picks (F32,
// F16 or BF16), written by hand as the format describes.
void write_mixed_safetensors(
  const fs::path& file, const job_config& cfg, const tensor_map& t,
  const std::function<std::string(const std::string&)>& dtype_of) {
  nlohmann::ordered_json header;
  std::string data;
  for (const auto& [name, values] : t) {
    const auto dtype = dtype_of(name);
    const size_t begin = data.size();
    for (float v : values) {
      if (dtype == "F32") {
        data.append(reinterpret_cast<const char*>(&v), 4);
      } else {
        uint16_t h = 0;
        if (dtype == "F16") {
          h = store::float_to_half(v);
        } else {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          h = static_cast<uint16_t>(bits >> 16);
        }
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header[name] = {{"dtype", dtype},
                    {"shape", hf_shape(cfg, name)},
                    {"data_offsets", {begin, data.size()}}};
  }
  auto text = header.dump();
  while ((text.size() + 8) % 8)
    text += ' ';
  std::string bytes(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(bytes.data(), &n, 8);
  write_text(file, bytes + text + data);
}

} // namespace

TEST_CASE("F16 and BF16 weights in index shards load as their exact values",
          "[unit]") {
  auto cfg = serve_test_config(32, 32, 64, 2, 4, 2, 4, 2, 16);
  auto tensors = random_model_tensors(cfg, 15);
  auto dtype_of = [](const std::string& name) -> std::string {
    if (name.find(".experts.") != std::string::npos)
      return "F16";
    if (name.find("e_score_correction_bias") != std::string::npos)
      return "F32";
    return "BF16";
  };
  // The values the 16-bit files hold, as an F32 export.
  auto rounded = tensors;
  for (auto& [name, values] : rounded)
    for (float& v : values) {
      if (dtype_of(name) == "F16") {
        v = store::half_to_float(store::float_to_half(v));
      } else if (dtype_of(name) == "BF16") {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        bits &= 0xffff0000u;
        std::memcpy(&v, &bits, 4);
      }
    }
  auto root = scratch("serve_engine_half");
  write_export_dir(root / "f32", cfg, rounded);
  fs::create_directories(root / "half");
  fs::copy_file(root / "f32" / "config.json", root / "half" / "config.json");
  tensor_map experts, dense;
  nlohmann::json map;
  for (const auto& [name, values] : tensors) {
    const bool expert = name.find(".experts.") != std::string::npos;
    (expert ? experts : dense)[name] = values;
    map[name] = expert ? "model-00002-of-00002.safetensors"
                       : "model-00001-of-00002.safetensors";
  }
  write_mixed_safetensors(root / "half" / "model-00001-of-00002.safetensors",
                          cfg, dense, dtype_of);
  write_mixed_safetensors(root / "half" / "model-00002-of-00002.safetensors",
                          cfg, experts, dtype_of);
  write_text(
    root / "half" / "model.safetensors.index.json",
    nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}
      .dump());
  auto a = load_or_fail(root / "f32");
  auto b = load_or_fail(root / "half");
  CHECK(a.embed == b.embed);
  CHECK(a.layers[1].w2 == b.layers[1].w2);
  CHECK(a.layers[0].q == b.layers[0].q);
  CHECK(a.layers[0].router_bias == b.layers[0].router_bias);
}
