#pragma once
// The model's shape in Hugging Face's config.json (MixtralForCausalLM or
// Qwen3MoeForCausalLM, by model_type): read from a model directory, written
// for an export. Both directions of the mapping live here, so they cannot
// disagree.

#include <filesystem>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/model/model_shape.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace tutti::model {

// A config.json's shape. A missing or non-positive required key is refused
// in one line naming the file and the key.
expected<model_shape> read_hf_config(const std::filesystem::path& file);

// The config.json text of the model in rank 0's shard header; rope_theta
// and rms_norm_eps are written exactly as they were configured (the header
// keeps them as text).
std::string hf_config_text(const store::shard_meta& rank0);

} // namespace tutti::model
