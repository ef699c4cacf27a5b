#include "fp8_weights.hpp"

#include <string_view>
#include <vector>

namespace tutti::model::detail {

namespace {

constexpr std::string_view scale_suffix = "_scale_inv";

} // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string scaled_weight_of(const std::string& hf) {
  if (hf.size() <= scale_suffix.size()
      || hf.compare(hf.size() - scale_suffix.size(), scale_suffix.size(),
                    scale_suffix)
           != 0)
    return "";
  return hf.substr(0, hf.size() - scale_suffix.size());
}

status fp8_names::note(const std::string& hf, store::stored_as how) {
  if (const auto w = scaled_weight_of(hf); !w.empty()) {
    scaled_.insert(w);
    return {};
  }
  if (how != store::stored_as::fp8_e4m3)
    return {};
  if (!blocks_)
    return status::error(source_ + ": tensor " + hf
                         + " is F8_E4M3 but config.json's "
                           "quantization_config gives no FP8 block size");
  weights_.insert(hf);
  return {};
}

status fp8_names::check() const {
  for (const auto& w : weights_)
    if (!scaled_.count(w))
      return status::error(source_ + ": tensor " + w + " is F8_E4M3 but its "
                           + "scales " + w + std::string(scale_suffix)
                           + " are missing");
  for (const auto& w : scaled_)
    if (!weights_.count(w))
      return status::error(source_ + ": tensor " + w + std::string(scale_suffix)
                           + " scales " + w
                           + ", which is not an F8_E4M3 weight of the model");
  return {};
}

status dequantize_fp8(store::named_tensor& weight,
                      const store::named_tensor& scale_inv,
                      fp8_block_size blocks, const std::string& source) {
  const auto& w = weight.shape;
  if (w.size() != 2)
    return status::error(source + ": tensor " + weight.name
                         + " is F8_E4M3 of shape " + shape_text(w)
                         + ", not a matrix its block scales fit");
  const int64_t rows = w[0], cols = w[1];
  const int64_t block_rows = (rows + blocks.out - 1) / blocks.out;
  const int64_t block_cols = (cols + blocks.in - 1) / blocks.in;
  const std::vector<int64_t> want{block_rows, block_cols};
  if (scale_inv.shape != want)
    return status::error(source + ": tensor " + scale_inv.name + " has shape "
                         + shape_text(scale_inv.shape) + ", expected "
                         + shape_text(want) + " for " + weight.name + " "
                         + shape_text(w) + " in blocks of "
                         + shape_text({blocks.out, blocks.in}));
  for (int64_t i = 0; i < rows; ++i) {
    const float* scale = scale_inv.data.data() + (i / blocks.out) * block_cols;
    float* row = weight.data.data() + i * cols;
    for (int64_t j = 0; j < cols; ++j)
      row[j] *= scale[j / blocks.in];
  }
  weight.fp8_e4m3 = false;
  return {};
}

bool fp8_pairs::takes(const store::named_tensor& t) {
  return t.fp8_e4m3 || !scaled_weight_of(t.name).empty();
}

status fp8_pairs::put(store::named_tensor&& t,
                      const store::tensor_sink& ready) {
  // fp8_names refused an F8 weight without a block size; scales without
  // one come here.
  if (!blocks_)
    return status::error(source_ + ": tensor " + t.name
                         + " needs config.json's quantization_config");
  std::string weight = scaled_weight_of(t.name);
  if (weight.empty()) {
    weight = t.name;
    weights_.insert_or_assign(weight, std::move(t));
  } else {
    scales_.insert_or_assign(weight, std::move(t));
  }
  const auto w = weights_.find(weight);
  const auto s = scales_.find(weight);
  if (w == weights_.end() || s == scales_.end())
    return {};
  auto done = std::move(w->second);
  weights_.erase(w);
  const auto scaled = dequantize_fp8(done, s->second, *blocks_, source_);
  scales_.erase(s);
  TUTTI_RETURN_IF_ERROR(scaled);
  return ready(std::move(done));
}

} // namespace tutti::model::detail
