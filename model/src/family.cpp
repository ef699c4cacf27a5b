#include "tutti/model/family.hpp"

#include <array>
#include <utility>

#include "tutti/model/tensor_names.hpp"

namespace tutti::model {

namespace {

using pairs = std::array<std::pair<const char*, const char*>, 4>;

// Qwen3-MoE's and DeepSeek-V3's layer parts against Mixtral's: (tutti,
// Hugging Face), each matched as a whole dot-separated part of the name.
constexpr pairs mlp_parts{{{".block_sparse_moe.", ".mlp."},
                           {".w1.weight", ".gate_proj.weight"},
                           {".w3.weight", ".up_proj.weight"},
                           {".w2.weight", ".down_proj.weight"}}};

std::string replace_parts(std::string name, bool to_hf) {
  for (const auto& [tutti, hf] : mlp_parts) {
    const std::string from = to_hf ? tutti : hf, to = to_hf ? hf : tutti;
    if (const auto at = name.find(from); at != std::string::npos)
      name.replace(at, from.size(), to);
  }
  return name;
}

// A family whose MoE block is `mlp` (Qwen3-MoE, DeepSeek-V3).
bool mlp_family(model_family f) {
  return f == model_family::qwen3_moe || f == model_family::deepseek_v3;
}

// A leading dense layer's MLP: the same name in tutti and Hugging Face.
bool dense_mlp(const std::string& name) {
  for (const char* part :
       {names::dense_gate, names::dense_up, names::dense_down})
    if (const std::string tail = std::string(".") + part;
        name.size() > tail.size()
        && name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
      return true;
  return false;
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
  return mlp_family(f) && !dense_mlp(name) ? replace_parts(name, true) : name;
}

std::string tutti_tensor_name(model_family f, const std::string& hf_name) {
  if (!mlp_family(f) || dense_mlp(hf_name))
    return hf_name;
  // Only the MoE block's names differ: a Mixtral name in a Qwen3-MoE
  // checkpoint must not pass for Qwen3's.
  if (hf_name.find(".block_sparse_moe.") != std::string::npos)
    return hf_name;
  return replace_parts(hf_name, false);
}

} // namespace tutti::model
