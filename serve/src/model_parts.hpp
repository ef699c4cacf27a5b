#pragma once
// The steps of loading a served model (model_loader.cpp), shared with the
// loader of a daemon's own experts (expert_loading.cpp): the dense
// weights taken and packed, one expert packed, and what lies beside the
// weights (tokenizer, chat template).

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/serve/model.hpp"

namespace tutti::serve {

using tensor_map = std::map<std::string, std::vector<float>>;
using shape_map = std::map<std::string, std::vector<int64_t>>;

// Every tensor but the experts' moved out of `tensors` into `m` (its shape
// set), shapes checked; m.layers sized. Errors name the tensor.
status take_dense(served_model& m, tensor_map& tensors, const shape_map& shapes,
                  const std::string& source);
// The packed copies of the dense matrices.
void pack_dense(served_model& m);

// One expert's matrices, row-major: w1, w3 [intermediate, hidden], w2
// [hidden, intermediate]; with scales ([out] each) int8 codes as floats.
struct expert_matrices {
  const float *w1 = nullptr, *w3 = nullptr, *w2 = nullptr;
  const float *w1_scale = nullptr, *w3_scale = nullptr, *w2_scale = nullptr;
  // Or w1 and w3 stacked already, [2 * intermediate, hidden] (w1, w3
  // unused): packed without another copy.
  const float* w13 = nullptr;
  // Float weights packed in bfloat16 (serve.weight_dtype: bf16).
  bool bf16 = false;
};
// Packs expert `e` into w.w13_t[e] and w.w2_t[e] (sized already).
void pack_expert(layer_weights& w, int64_t e, const model_shape& s,
                 const expert_matrices& x);

// The tokenizer and chat template beside the weights in `dir`, if any.
status load_beside_weights(const std::filesystem::path& dir, served_model& m);

} // namespace tutti::serve
