#pragma once
// The model's shape in Hugging Face's config.json (MixtralForCausalLM or
// Qwen3MoeForCausalLM, by model_type): read from a model directory, written
// for an export. Both directions of the mapping live here, so they cannot
// disagree.

#include <filesystem>
#include <optional>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/model/model_shape.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace tutti::model {

// The config.json keys of the feed-forward sizes, by family: Mixtral's
// intermediate_size and num_local_experts; Qwen3-MoE's and DeepSeek-V3's
// moe_intermediate_size with intermediate_size the dense layers' width,
// num_experts (Qwen3-MoE) or n_routed_experts (DeepSeek-V3).
struct hf_ffn_keys {
  const char* expert_width;
  const char* dense_width;
  const char* experts;
};
hf_ffn_keys ffn_keys_of(model_family f);

// A config.json's shape. A missing or non-positive required key is refused
// in one line naming the file and the key.
expected<model_shape> read_hf_config(const std::filesystem::path& file);

// A checkpoint's FP8 block scaling (config.json's quantization_config:
// quant_method fp8, fmt e4m3, weight_block_size [out, in]): each F8_E4M3
// weight [O, I] has a `_scale_inv` of [ceil(O / out), ceil(I / in)].
struct fp8_block_size {
  int64_t out = 0, in = 0;
};

// config.json's block size of FP8 weights: none where quantization_config
// is absent, null or compressed-tensors' (`tutti export --dtype int8`'s,
// whose I8 weights carry their scales); quant_method fp8 with fmt e4m3,
// dynamic activations and weight_block_size [out, in] (and
// modules_to_not_convert, a list of names: the tensors' dtypes say which
// are FP8). Anything else
// (another method or format, static activation scales, a block size that
// is not two positive integers, a key tutti does not know) refused in one
// line naming the field; read_hf_config refuses the same.
expected<std::optional<fp8_block_size>> read_hf_quantization(
  const std::filesystem::path& file);

// The config.json text of the model in rank 0's shard header; rope_theta
// and rms_norm_eps are written exactly as they were configured (the header
// keeps them as text).
std::string hf_config_text(const store::shard_meta& rank0);

} // namespace tutti::model
