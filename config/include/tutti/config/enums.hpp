#pragma once
// The closed value sets of the job config. Each enum's names live in one
// table (enum_names below); to_string, from_string, a refusal's "a, b or c"
// and the key reference all read it.

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tutti {

// cluster_config.device: where ranks compute.
enum class compute_device { cpu, cuda };
// train.gemm_precision: GEMM inputs in fp32, or bf16 with fp32 accumulation.
enum class gemm_precision { fp32, bf16 };
// train.precision.*: what a kind of training state is stored in.
enum class storage_dtype { fp32, bf16 };
// train.recompute: which activations backward recomputes instead of keeping.
enum class recompute_mode { none, selective, full };
// diag.on_start: the interconnect check before every job start.
enum class preflight_check { off, warn, refuse };
// moe_config.all_to_all_communication: disabled keeps all experts local.
enum class all_to_all_mode { enabled, disabled };
// moe_config.dispatch_dtype: the rows the MoE dispatch sends, as they are
// or quantized per row to 8 bits (moe/token_exchange.hpp).
enum class dispatch_dtype { fp32, int8, fp8 };
// serve.weight_dtype: the served experts' weights, float32, int8 with a
// float32 scale per output channel, or bfloat16 (kernels/packed_gemm.hpp).
enum class weight_dtype { fp32, int8, bf16 };
// serve.activation_dtype: the rows int8 experts multiply, float32 or
// quantized per row to int8 (kernels/packed_gemm.hpp).
enum class activation_dtype { fp32, int8 };
// model.family: the architecture the weights belong to, by Hugging Face's
// model_type (model/family.hpp holds what differs between them).
enum class model_family { mixtral, qwen3_moe, deepseek_v3 };
// moe_config.scoring_func: the router's expert scores, a softmax over the
// experts or each expert's sigmoid (DeepSeek-V3).
enum class scoring_func { softmax, sigmoid };
// cluster_config.local_transport: how ranks of one process exchange.
enum class local_transport_kind { memory, tcp };
// supervision.<kind>.strategy: which children restart with a failed one.
enum class restart_strategy { one_for_one, rest_for_one, one_for_all };
// supervision.<kind>.restart: whether a child that ended comes back.
enum class restart_type { permanent, transient, temporary };

// cluster_config.communication_backend is an open set: the config keeps any
// name as written (`tutti plan` works on a backend that does not exist yet;
// a job start refuses it, naming it), so it stays text, and this is what the
// text means to the code.
enum class backend_kind { gloo, nccl, other };

// names[i] is the name of the enumerator with value i.
template <class E>
struct enum_names;

template <>
struct enum_names<compute_device> {
  static constexpr std::array names{"cpu", "cuda"};
};
template <>
struct enum_names<gemm_precision> {
  static constexpr std::array names{"fp32", "bf16"};
};
template <>
struct enum_names<storage_dtype> {
  static constexpr std::array names{"fp32", "bf16"};
};
template <>
struct enum_names<recompute_mode> {
  static constexpr std::array names{"none", "selective", "full"};
};
template <>
struct enum_names<preflight_check> {
  static constexpr std::array names{"off", "warn", "refuse"};
};
template <>
struct enum_names<all_to_all_mode> {
  static constexpr std::array names{"enabled", "disabled"};
};
template <>
struct enum_names<dispatch_dtype> {
  static constexpr std::array names{"fp32", "int8", "fp8"};
};
template <>
struct enum_names<weight_dtype> {
  static constexpr std::array names{"fp32", "int8", "bf16"};
};
template <>
struct enum_names<activation_dtype> {
  static constexpr std::array names{"fp32", "int8"};
};
template <>
struct enum_names<model_family> {
  static constexpr std::array names{"mixtral", "qwen3_moe", "deepseek_v3"};
};
template <>
struct enum_names<scoring_func> {
  static constexpr std::array names{"softmax", "sigmoid"};
};
template <>
struct enum_names<local_transport_kind> {
  static constexpr std::array names{"memory", "tcp"};
};
template <>
struct enum_names<restart_strategy> {
  static constexpr std::array names{"one_for_one", "rest_for_one",
                                    "one_for_all"};
};
template <>
struct enum_names<restart_type> {
  static constexpr std::array names{"permanent", "transient", "temporary"};
};
template <>
struct enum_names<backend_kind> {
  static constexpr std::array names{"gloo", "nccl", "other"};
};

template <class E>
concept named_enum = std::is_enum_v<E> && requires {
  enum_names<E>::names;
};

template <named_enum E>
constexpr const char* to_string(E value) {
  const auto i = static_cast<std::size_t>(value);
  const auto& names = enum_names<E>::names;
  return i < names.size() ? names[i] : "?";
}

template <named_enum E>
constexpr std::optional<E> from_string(std::string_view text) {
  const auto& names = enum_names<E>::names;
  for (std::size_t i = 0; i < names.size(); ++i)
    if (text == names[i])
      return static_cast<E>(i);
  return std::nullopt;
}

// The names as a list: "a, b or c" (last_separator " or "), or "a | b | c"
// (separator " | ", last_separator " | ").
template <named_enum E>
std::string enum_choices(std::string_view separator = ", ",
                         std::string_view last_separator = " or ") {
  const auto& names = enum_names<E>::names;
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0)
      out += i + 1 == names.size() ? last_separator : separator;
    out += names[i];
  }
  return out;
}

} // namespace tutti
