#pragma once
// Shared by the FP8 checkpoint tests: a model of serve_test_support.hpp
// written as DeepSeek-V3's FP8 checkpoints are (each projection's weight
// F8_E4M3 with a float32 `_scale_inv` per block, as DeepSeek's quantizer
// makes them), and beside it the same model as float32 with the
// dequantized values, which a loader must reproduce bit for bit.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "serve_test_support.hpp"
#include "tutti/model/family.hpp"
#include "tutti/store/safetensors.hpp"

namespace tutti::testing {

// The e4m3 value nearest `x`, ties to the even code; beyond 448, 448 (as
// DeepSeek's quantizer never produces: its scales map a block's largest
// magnitude to 448).
inline float round_to_e4m3(float x) {
  float best = 0;
  int best_code = 0;
  for (int code = 0; code <= 0x7E; ++code) {
    const float v = store::fp8_e4m3_value(uint8_t(code));
    const float d = std::fabs(std::fabs(x) - v);
    const float b = std::fabs(std::fabs(x) - best);
    if (d < b || (d == b && code % 2 == 0 && best_code % 2 == 1)) {
      best = v;
      best_code = code;
    }
  }
  return x < 0 ? -best : best;
}

// A linear layer's weight in DeepSeek-V3's FP8 checkpoints: every
// projection (attention's, the dense and shared MLPs', the experts');
// never the embedding, norms, router or head.
inline bool stored_fp8(const std::string& hf,
                       const std::vector<int64_t>& shape) {
  return shape.size() == 2 && hf.find("_proj") != std::string::npos;
}

struct fp8_export {
  std::vector<store::named_tensor> fp8;     // the weights' e4m3 values, scales
  std::vector<store::named_tensor> dequant; // the same model as float32
};

// `t` (tutti's names) under DeepSeek-V3's Hugging Face names, each linear
// weight quantized per block of bo x bi as DeepSeek's quantizer does: a
// block's scale its largest magnitude / 448, its values rounded to e4m3.
inline fp8_export quantized(const job_config& cfg, const tensor_map& t,
                            int64_t bo, int64_t bi) {
  fp8_export out;
  for (const auto& [name, values] : t) {
    const auto hf = model::hf_tensor_name(model_family::deepseek_v3, name);
    const auto shape = hf_shape(cfg, name);
    if (!stored_fp8(hf, shape)) {
      out.fp8.push_back({hf, shape, values});
      out.dequant.push_back({hf, shape, values});
      continue;
    }
    const int64_t rows = shape[0], cols = shape[1];
    const int64_t br = (rows + bo - 1) / bo, bc = (cols + bi - 1) / bi;
    std::vector<float> scale(br * bc, 0.0f);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        float& s = scale[(i / bo) * bc + j / bi];
        s = std::max(s, std::fabs(values[i * cols + j]));
      }
    for (auto& s : scale)
      s = s > 0 ? s / 448.0f : 1.0f;
    store::named_tensor q{hf, shape, values}, d{hf, shape, values};
    q.fp8_e4m3 = true;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const float s = scale[(i / bo) * bc + j / bi];
        q.data[i * cols + j] = round_to_e4m3(values[i * cols + j] / s);
        d.data[i * cols + j] = q.data[i * cols + j] * s;
      }
    out.fp8.push_back(std::move(q));
    out.fp8.push_back({hf + "_scale_inv", {br, bc}, scale});
    out.dequant.push_back(std::move(d));
  }
  return out;
}

inline nlohmann::json fp8_config(const nlohmann::json& block_size) {
  return {{"quant_method", "fp8"},
          {"fmt", "e4m3"},
          {"activation_scheme", "dynamic"},
          {"weight_block_size", block_size}};
}

// config.json (cfg's, with `quant` as quantization_config unless null)
// and model.safetensors holding `tensors`, in `dir`; returns `dir`.
inline std::filesystem::path write_quantized_dir(
  const std::filesystem::path& dir, const job_config& cfg,
  const nlohmann::json& quant,
  const std::vector<store::named_tensor>& tensors) {
  std::filesystem::create_directories(dir);
  auto j = hf_config_json(cfg);
  if (!quant.is_null())
    j["quantization_config"] = quant;
  write_text(dir / "config.json", j.dump(2));
  REQUIRE(store::write_safetensors(dir / "model.safetensors", tensors).ok());
  return dir;
}

} // namespace tutti::testing
