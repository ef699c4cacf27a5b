// DeepSeek-V3's FP8 checkpoints: linear weights stored F8_E4M3 with a
// float32 `_scale_inv` per block (config.json's quantization_config) load
// dequantized to the float32 weights a float32 directory of the same
// values holds, bit for bit: the same logits served whole, streamed as a
// serving daemon loads (all experts or some), quantized to int8 at load,
// and at 2 expert-parallel ranks; whatever the block size (dividing the
// dims or not) and wherever a weight's scales lie (before it, in another
// file). The e4m3 decode table's known values; malformed
// quantization_config, unscaled FP8 weights and mis-shaped scales refused
// in one line naming the field or tensor.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "fp8_export.hpp"
#include "serve_requests.hpp"
#include "serve_test_support.hpp"
#include "tutti/model/family.hpp"
#include "tutti/model/weights.hpp"
#include "tutti/serve/engine.hpp"
#include "tutti/serve/expert_loading.hpp"
#include "tutti/serve/kv_cache.hpp"
#include "tutti/serve/sampler.hpp"
#include "tutti/serve/service.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// served_jobs draws tokens below 64; 2 layers (a dense one) of 6 experts.
constexpr int V = 64, P = 12, L = 2, E = 6;

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

fs::path write_dir(const std::string& name, const job_config& cfg,
                   const nlohmann::json& quant,
                   const std::vector<store::named_tensor>& tensors) {
  return write_quantized_dir(scratch("fp8_checkpoint_" + name) / "hf", cfg,
                             quant, tensors);
}

// The same, over two files: every `_scale_inv` in the first (so that a
// weight's scales come before it), the other tensors in the second.
fs::path write_sharded_dir(const std::string& name, const job_config& cfg,
                           const nlohmann::json& quant,
                           const std::vector<store::named_tensor>& tensors) {
  const auto dir = scratch("fp8_checkpoint_" + name) / "hf";
  fs::create_directories(dir);
  auto j = hf_config_json(cfg);
  j["quantization_config"] = quant;
  write_text(dir / "config.json", j.dump(2));
  std::vector<store::named_tensor> scales, rest;
  nlohmann::json map;
  for (const auto& t : tensors) {
    const bool scale = t.name.find("_scale_inv") != std::string::npos;
    (scale ? scales : rest).push_back(t);
    map[t.name] = scale ? "model-00001-of-00002.safetensors"
                        : "model-00002-of-00002.safetensors";
  }
  REQUIRE(
    store::write_safetensors(dir / "model-00001-of-00002.safetensors", scales)
      .ok());
  REQUIRE(
    store::write_safetensors(dir / "model-00002-of-00002.safetensors", rest)
      .ok());
  write_text(dir / "model.safetensors.index.json",
             nlohmann::json{{"weight_map", map}}.dump(2));
  return dir;
}

serve::served_model loaded(const fs::path& dir) {
  auto m = serve::load_model(dir);
  INFO(m.message());
  REQUIRE(m.ok());
  return std::move(m.value());
}

serve::served_model loaded_part(const fs::path& dir,
                                const serve::expert_set& held,
                                weight_dtype dtype = weight_dtype::fp32) {
  auto m = serve::load_model_part(dir, held, dtype);
  INFO(m.message());
  REQUIRE(m.ok());
  return std::move(m.value());
}

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

// Every tensor stream_weights gives of the experts `take` names (tutti's
// names), and the dense ones.
std::map<std::string, std::vector<float>> streamed(
  const fs::path& dir, const std::function<bool(const std::string&)>& take) {
  std::map<std::string, std::vector<float>> out;
  auto shape = model::stream_weights(
    dir,
    [&](const model::model_shape&, const std::string& name, bool int8) {
      CHECK_FALSE(int8);
      return take(name);
    },
    [&](store::named_tensor&& t) {
      CHECK_FALSE(t.fp8_e4m3);
      out[t.name] = std::move(t.data);
      return status{};
    });
  INFO(shape.message());
  REQUIRE(shape.ok());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size()
         && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

} // namespace

TEST_CASE("FP8 e4m3: the decode table's known values", "[unit]") {
  CHECK(store::fp8_e4m3_value(0x38) == 1.0f);
  CHECK(store::fp8_e4m3_value(0x7E) == 448.0f);
  CHECK(store::fp8_e4m3_value(0xFE) == -448.0f);
  CHECK(store::fp8_e4m3_value(0x01) == std::ldexp(1.0f, -9));
  CHECK(store::fp8_e4m3_value(0x07) == std::ldexp(7.0f, -9));
  CHECK(store::fp8_e4m3_value(0x08) == std::ldexp(1.0f, -6));
  CHECK(store::fp8_e4m3_value(0x3C) == 1.5f);
  CHECK(store::fp8_e4m3_value(0x00) == 0.0f);
  CHECK(bits_of(store::fp8_e4m3_value(0x80)) == 0x80000000u); // -0
  CHECK(std::isnan(store::fp8_e4m3_value(0x7F)));
  CHECK(std::isnan(store::fp8_e4m3_value(0xFF)));
  // 0x78 (2^8) .. 0x7E: no infinities, 0x7E the largest.
  CHECK(store::fp8_e4m3_value(0x78) == 256.0f);
  CHECK(store::fp8_e4m3_value(0x77) == 240.0f);
  // Every other code a distinct value, increasing with the code.
  for (int c = 1; c <= 0x7E; ++c) {
    INFO("code " << c);
    CHECK(store::fp8_e4m3_value(uint8_t(c))
          > store::fp8_e4m3_value(uint8_t(c - 1)));
    CHECK(store::fp8_e4m3_value(uint8_t(c | 0x80))
          == -store::fp8_e4m3_value(uint8_t(c)));
  }
  // The test's rounding: ties to the even code.
  CHECK(round_to_e4m3(1.0625f) == 1.0f);   // between 0x38 and 0x39
  CHECK(round_to_e4m3(1.1875f) == 1.25f);  // between 0x39 and 0x3A
  CHECK(round_to_e4m3(-0.3f) == -0.3125f); // the nearest
  // Written and read back as F8_E4M3, every value of the table.
  std::vector<float> table;
  for (int c = 0; c < 256; ++c)
    if (c != 0x7F && c != 0xFF)
      table.push_back(store::fp8_e4m3_value(uint8_t(c)));
  store::named_tensor t{"t", {int64_t(table.size())}, table};
  t.fp8_e4m3 = true;
  const auto file = scratch("fp8_table") / "t.safetensors";
  REQUIRE(store::write_safetensors(file, {t}).ok());
  CHECK(fs::file_size(file) < 400); // a byte each
  auto back = store::read_safetensors_as_f32(file);
  REQUIRE(back.ok());
  CHECK(back.value()[0].fp8_e4m3);
  CHECK(same_bits(back.value()[0].data, table));
  CHECK_FALSE(store::read_safetensors(file).ok()); // F32 only
  // A value that is not e4m3 is not written as one.
  t.data[3] = 0.1f;
  const auto refused = store::write_safetensors(file, {t});
  CHECK(refused.message().find("'t' is fp8_e4m3 but holds 0.1")
        != std::string::npos);
}

TEST_CASE("FP8 checkpoints: dequantized at load, the float32 model's "
          "weights and logits bit for bit",
          "[unit]") {
  const auto cfg = deepseek_test_config(V, 96);
  const auto tensors = random_model_tensors(cfg, 53);
  const auto prompt = random_prompt(19, P, V);
  // [16, 16]: blocks dividing no dim but 16; [8, 8]: partial blocks of
  // the 20-wide dense layer and the 12-wide latent.
  const std::pair<int64_t, int64_t> block_sizes[] = {{16, 16}, {8, 8}};
  for (const auto& [bo, bi] : block_sizes) {
    const auto tag = std::to_string(bo) + "x" + std::to_string(bi);
    INFO("blocks " << tag);
    const auto q = quantized(cfg, tensors, bo, bi);
    int64_t fp8_weights = 0;
    for (const auto& t : q.fp8)
      fp8_weights += t.fp8_e4m3;
    CHECK(fp8_weights == 5 * L + 3 + 3 + 3 * E); // attention, MLPs, experts
    auto quant = fp8_config({bo, bi});
    if (bo == 8) // as Qwen3's FP8 checkpoints say what stays unquantized
      quant["modules_to_not_convert"] = {"lm_head", "mlp.gate"};
    const auto f32_dir = write_dir("f32_" + tag, cfg, nullptr, q.dequant);
    const auto fp8_dir = bo == 16
                           ? write_dir("fp8_" + tag, cfg, quant, q.fp8)
                           : write_sharded_dir("fp8_" + tag, cfg, quant, q.fp8);

    // The loader's float32 weights: the same tensors, the same bits.
    auto want = model::load_weights(f32_dir);
    auto got = model::load_weights(fp8_dir);
    INFO(got.message());
    REQUIRE(want.ok());
    REQUIRE(got.ok());
    std::map<std::string, const store::named_tensor*> by_name;
    for (const auto& t : got.value().tensors)
      by_name[t.name] = &t;
    CHECK(by_name.size() == want.value().tensors.size());
    for (const auto& t : want.value().tensors) {
      INFO(t.name);
      REQUIRE(by_name.count(t.name));
      CHECK_FALSE(by_name[t.name]->fp8_e4m3);
      CHECK(by_name[t.name]->shape == t.shape);
      CHECK(same_bits(by_name[t.name]->data, t.data));
    }

    // Served: whole, streamed with every expert, quantized at load.
    const serve::expert_set all(L * E, 1);
    const auto logits = served_logits(loaded(f32_dir), prompt);
    CHECK(served_logits(loaded(fp8_dir), prompt) == logits);
    CHECK(served_logits(loaded_part(fp8_dir, all), prompt) == logits);
    CHECK(
      served_logits(loaded_part(fp8_dir, all, weight_dtype::int8), prompt)
      == served_logits(loaded_part(f32_dir, all, weight_dtype::int8), prompt));

    // A daemon's part: its experts and the dense tensors, read alone.
    auto odd = [](const std::string& name) {
      const auto at = name.find(".experts.");
      return at == std::string::npos || std::stoi(name.substr(at + 9)) % 2;
    };
    const auto part = streamed(fp8_dir, odd);
    const auto part_want = streamed(f32_dir, odd);
    CHECK(part.size() == part_want.size());
    for (const auto& [name, values] : part_want) {
      INFO(name);
      REQUIRE(part.count(name));
      CHECK(same_bits(part.at(name), values));
    }
    serve::expert_set held(L * E, 0);
    for (int e = 1; e < E; e += 2)
      held[1 * E + e] = 1;
    const auto daemon = loaded_part(fp8_dir, held);
    CHECK(daemon.holds_expert(1, 1));
    CHECK_FALSE(daemon.holds_expert(1, 2));
  }
}

TEST_CASE("FP8 checkpoints: the same bits at 2 expert-parallel ranks",
          "[unit]") {
  const auto cfg = deepseek_test_config(V, 96);
  const auto q = quantized(cfg, random_model_tensors(cfg, 59), 16, 16);
  const auto f32_dir = write_dir("ep_f32", cfg, nullptr, q.dequant);
  const auto fp8_dir = write_dir("ep_fp8", cfg, fp8_config({16, 16}), q.fp8);
  const auto js = served_jobs(4);
  auto serve_on_two = [&](const fs::path& dir) {
    auto s = start_service(ep_limits(2), loaded(dir));
    auto out = serve_all_jobs(*s, js);
    s->stop();
    return out;
  };
  const auto want = serve_on_two(f32_dir);
  check_same_outcomes(serve_on_two(fp8_dir), want, js);
}

TEST_CASE("FP8 checkpoints: a bad quantization_config or scale refused in "
          "one line naming it",
          "[unit]") {
  const auto cfg = deepseek_test_config(V, 96);
  const auto q = quantized(cfg, random_model_tensors(cfg, 61), 16, 16);
  const auto good = fp8_config({16, 16});
  const std::string expert =
    "model.layers.1.mlp.experts.2.gate_proj.weight"; // [16, 24]
  // The refusals of a whole load and of a daemon's streamed one.
  auto refused = [&](const std::string& name, const nlohmann::json& quant,
                     const std::vector<store::named_tensor>& t) {
    const auto dir = write_dir("bad_" + name, cfg, quant, t);
    std::vector<std::string> out;
    auto whole = serve::load_model(dir);
    auto part = serve::load_model_part(dir, serve::expert_set(L * E, 1),
                                       weight_dtype::fp32);
    for (const status& s : {whole.error(), part.error()}) {
      REQUIRE_FALSE(s.ok());
      CHECK(s.message().find('\n') == std::string::npos);
      out.push_back(s.message());
    }
    return out;
  };
  auto says = [&](const std::string& name, const nlohmann::json& quant,
                  const std::vector<store::named_tensor>& t,
                  const std::vector<std::string>& parts) {
    for (const auto& m : refused(name, quant, t))
      for (const auto& p : parts) {
        INFO(m);
        CHECK(m.find(p) != std::string::npos);
      }
  };
  auto with = [&](const char* key, const nlohmann::json& v) {
    auto j = good;
    j[key] = v;
    return j;
  };
  says("block3", with("weight_block_size", {64, 96, 2}), q.fp8,
       {"quantization_config.weight_block_size: [64, 96, 2] is not two "
        "positive integers"});
  says("block0", with("weight_block_size", {0, 16}), q.fp8,
       {"quantization_config.weight_block_size: [0, 16] is not two positive "
        "integers"});
  says("e5m2", with("fmt", "e5m2"), q.fp8,
       {"quantization_config.fmt: e5m2 is not supported (e4m3 only)"});
  says("awq", with("quant_method", "awq"), q.fp8,
       {"quantization_config.quant_method: awq is not supported"});
  says("static", with("activation_scheme", "static"), q.fp8,
       {"quantization_config.activation_scheme: static is not supported"});
  says("unknown", with("ignored_layers", nlohmann::json::array()), q.fp8,
       {"quantization_config.ignored_layers is not supported with fp8"});
  says("unconverted", with("modules_to_not_convert", {"lm_head", 3}), q.fp8,
       {"quantization_config.modules_to_not_convert: [\"lm_head\", 3] is "
        "not a list of module names"});
  auto per_tensor = good;
  per_tensor.erase("weight_block_size");
  says("per_tensor", per_tensor, q.fp8,
       {"quantization_config.weight_block_size missing"});
  // FP8 weights without the block size they need.
  says("no_config", nullptr, q.fp8,
       {"is F8_E4M3 but config.json's quantization_config gives no FP8 "
        "block size"});
  says("int8_note", {{"quant_method", "compressed-tensors"}}, q.fp8,
       {"is F8_E4M3 but config.json's quantization_config gives no FP8 "
        "block size"});
  says("no_method", {{"weight_block_size", {16, 16}}}, q.fp8,
       {"quantization_config.quant_method missing"});
  // An FP8 weight without its scales; scales of the wrong shape; scales
  // of a weight that is not FP8.
  auto drop = [&](const std::string& name) {
    auto t = q.fp8;
    std::erase_if(t,
                  [&](const store::named_tensor& x) { return x.name == name; });
    return t;
  };
  says("unscaled", good, drop(expert + "_scale_inv"),
       {"tensor " + expert + " is F8_E4M3 but its scales " + expert
        + "_scale_inv are missing"});
  auto misshaped = q.fp8;
  for (auto& t : misshaped)
    if (t.name == expert + "_scale_inv")
      t = {t.name, {1, 1}, {1.0f}};
  says("misshaped", good, misshaped,
       {"tensor " + expert + "_scale_inv has shape [1,1], expected [1,2] for "
        + expert + " [16,24] in blocks of [16,16]"});
  auto float_weight = drop(expert);
  for (const auto& t : q.dequant)
    if (t.name == expert)
      float_weight.push_back(t);
  says("float_scaled", good, float_weight,
       {"tensor " + expert + "_scale_inv scales " + expert
        + ", which is not an F8_E4M3 weight"});
}
