#include "tutti/model/family.hpp"

#include <array>
#include <utility>

namespace tutti::model {

namespace {

using pairs = std::array<std::pair<const char*, const char*>, 4>;

// Qwen3-MoE's layer parts against Mixtral's: (tutti, Hugging Face), each
// matched as a whole dot-separated part of the name.
constexpr pairs qwen3_parts{{{".block_sparse_moe.", ".mlp."},
                             {".w1.weight", ".gate_proj.weight"},
                             {".w3.weight", ".up_proj.weight"},
                             {".w2.weight", ".down_proj.weight"}}};

std::string replace_parts(std::string name, bool to_hf) {
  for (const auto& [tutti, hf] : qwen3_parts) {
    const std::string from = to_hf ? tutti : hf, to = to_hf ? hf : tutti;
    if (const auto at = name.find(from); at != std::string::npos)
      name.replace(at, from.size(), to);
  }
  return name;
}

} // namespace

const char* hf_architecture(model_family f) {
  switch (f) {
  case model_family::qwen3_moe:
    return "Qwen3MoeForCausalLM";
  case model_family::deepseek_v3:
    return "DeepseekV3ForCausalLM";
  case model_family::mixtral:
    break;
  }
  return "MixtralForCausalLM";
}

std::string hf_tensor_name(model_family f, const std::string& name) {
  return f == model_family::qwen3_moe ? replace_parts(name, true) : name;
}

std::string tutti_tensor_name(model_family f, const std::string& hf_name) {
  if (f != model_family::qwen3_moe)
    return hf_name;
  // Only the MoE block's names differ: a Mixtral name in a Qwen3-MoE
  // checkpoint must not pass for Qwen3's.
  if (hf_name.find(".block_sparse_moe.") != std::string::npos)
    return hf_name;
  return replace_parts(hf_name, false);
}

} // namespace tutti::model
