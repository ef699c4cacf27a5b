#pragma once
// What differs between the model families at the Hugging Face boundary:
// the architecture's names and the tensors' names. Inside tutti every
// family's tensors go by the names of tensor_names.hpp (Mixtral's); a
// Qwen3-MoE directory's are translated here on the way in and out, so
// training, checkpoints and serving have one naming. DeepSeek-V3's MoE
// block is named as Qwen3-MoE's (`mlp.experts.E.gate_proj`, `mlp.gate`,
// `mlp.gate.e_score_correction_bias`, `mlp.shared_experts.gate_proj`); the
// leading dense layers' `mlp.gate_proj` is the same name in both.

#include <string>

#include "tutti/config/enums.hpp"

namespace tutti::model {

// "MixtralForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM".
const char* hf_architecture(model_family f);

// A tensor's name in the family's Hugging Face checkpoints, from tutti's
// ("model.layers.0.block_sparse_moe.experts.3.w1.weight" is Qwen3-MoE's
// "model.layers.0.mlp.experts.3.gate_proj.weight"); names the family
// shares with Mixtral are returned as they are.
std::string hf_tensor_name(model_family f, const std::string& name);

// The inverse: tutti's name of a tensor of the family's checkpoints. A
// name that is not the family's comes back as it is (the loader then
// refuses it as unexpected).
std::string tutti_tensor_name(model_family f, const std::string& hf_name);

} // namespace tutti::model
