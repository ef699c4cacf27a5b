#pragma once
// Pipeline parallelism's split of the weights: stage s of p holds only its
// layers (job_config::stage_layer_counts: equal shares or as listed; with
// interleaved stages, several runs of them), the embedding with the first
// stage and the final norm and LM head with the last (the model has no
// tied embedding). Each stage's tensors keep the whole model's order; a
// checkpoint joins the stages' tensors by name into the one-stage layout.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/config/job_config.hpp"
#include "tutti/model/param_layout.hpp"

namespace tutti::train {

struct layer_range {
  int64_t first = 0, last = 0; // [first, last)
};

// The layers of one pipeline stage, as runs of consecutive layers (model
// chunks) in model order: one run, or with interleaved stages
// (cluster_config.pipeline_virtual_stages v) v runs, chunk c being virtual
// stage c * pp + s of pp * v equal ones.
struct stage_layers {
  std::vector<layer_range> chunks;
  bool holds(int64_t layer) const;
  std::vector<int64_t> list() const; // every layer, in order
};

// The layers of pipeline stage `stage` (all of them without PP).
stage_layers layers_of_stage(const job_config& cfg, int64_t stage);

// The layer a tensor's name belongs to ("model.layers.N."), -1 for none
// (embedding, final norm, LM head).
int64_t layer_of(const std::string& name);

// The tensors of `dense` (dense_layout, or a TP rank's tp_local_layout of
// it) that stage `stage` holds, offsets packed from 0.
model::param_layout stage_layout(const model::param_layout& dense,
                                 const job_config& cfg, int64_t stage);

// model::expert_layout's blocks of `layers` only, `count` experts each,
// named by their global layer.
model::param_layout expert_layout_of_layers(const model_config& m,
                                            int64_t count,
                                            const stage_layers& layers);

} // namespace tutti::train
