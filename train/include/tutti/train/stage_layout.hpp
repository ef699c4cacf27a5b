#pragma once
// Pipeline parallelism's split of the weights: stage s of p holds only its
// layers [first, last) (job_config::stage_layer_counts: equal shares or as listed), the
// embedding with the first stage and the final norm and LM head with the
// last (the model has no tied embedding). Each stage's tensors keep the
// whole model's order, so the stages' layouts one after another are the
// one-stage layout: a checkpoint joins them by concatenation.

#include <cstdint>
#include <string>

#include "tutti/config/job_config.hpp"
#include "tutti/model/param_layout.hpp"

namespace tutti::train {

struct layer_range {
  int64_t first = 0, last = 0; // [first, last)
};

// The layers of pipeline stage `stage` (all of them without PP).
layer_range stage_layers(const job_config& cfg, int64_t stage);

// The layer a tensor's name belongs to ("model.layers.N."), -1 for none
// (embedding, final norm, LM head).
int64_t layer_of(const std::string& name);

// The tensors of `dense` (dense_layout, or a TP rank's tp_local_layout of
// it) that stage `stage` holds, offsets packed from 0.
model::param_layout stage_layout(const model::param_layout& dense,
                                 const job_config& cfg, int64_t stage);

// model::expert_layout's blocks of layers [first, last) only, `count` experts
// each, named by their global layer.
model::param_layout expert_layout_of_layers(const model_config& m,
                                            int64_t count, layer_range layers);

} // namespace tutti::train
