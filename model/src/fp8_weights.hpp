#pragma once
// DeepSeek-V3's FP8 block-scaled weights (hf_config.hpp's fp8_block_size):
// an F8_E4M3 weight W [O, I] and its `<name>_scale_inv` S, dequantized at
// load to float32 W[i][j] = value(W[i][j]) * S[i / bo][j / bi], the
// product DeepSeek's own weight_dequant takes. The directory readers of
// weights.cpp pair them, whichever comes first and in whichever file.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/model/hf_config.hpp"
#include "tutti/store/safetensors.hpp"

namespace tutti::model::detail {

// "[2,3]": a tensor's shape in the loaders' messages.
std::string shape_text(const std::vector<int64_t>& shape);

// The weight a `<name>_scale_inv` tensor scales (by Hugging Face's name),
// or "" for any other tensor.
std::string scaled_weight_of(const std::string& hf);

// The names a directory's headers hold: every F8_E4M3 weight and every
// `_scale_inv`, checked as they come and in pairs at the end.
class fp8_names {
public:
  fp8_names(std::string source, std::optional<fp8_block_size> blocks)
    : source_(std::move(source)), blocks_(blocks) {}
  // A tensor of the directory (not one of a skipped layer's): an F8
  // weight without quantization_config is refused at once.
  status note(const std::string& hf, store::stored_as how);
  // Each F8 weight has its scales, each `_scale_inv` scales an F8 weight.
  status check() const;

private:
  std::string source_;
  std::optional<fp8_block_size> blocks_;
  std::set<std::string> weights_, scaled_;
};

// Scales `weight` (F8 values, Hugging Face's name) by `scale_inv` in place
// and marks it float; a scale of the wrong shape, or a weight that is not
// a matrix, refused naming the tensor and both shapes.
status dequantize_fp8(store::named_tensor& weight,
                      const store::named_tensor& scale_inv,
                      fp8_block_size blocks, const std::string& source);

// A reader's F8 weights and scales held until their partner is in; each
// weight then goes on dequantized. What is left unpaired the directory's
// fp8_names refuses.
class fp8_pairs {
public:
  fp8_pairs(std::string source, std::optional<fp8_block_size> blocks)
    : source_(std::move(source)), blocks_(blocks) {}
  // Whether `t` is one this holds: an F8 weight or a `_scale_inv`.
  static bool takes(const store::named_tensor& t);
  // Holds `t`; a weight whose scales are in goes to `ready`.
  status put(store::named_tensor&& t, const store::tensor_sink& ready);

private:
  std::string source_;
  std::optional<fp8_block_size> blocks_;
  std::map<std::string, store::named_tensor> weights_, scales_;
};

} // namespace tutti::model::detail
