#pragma once
// Tensor parallelism (Megatron's split): which weights a TP rank holds a
// slice of, and along which axis. Attention splits by head: q/k/v by
// output rows (column-parallel), o_proj by its input columns
// (row-parallel). The experts, the shared experts and the dense layers'
// MLPs split their intermediate dimension: w1/w3 (gate/up) by rows, w2
// (down) by columns. Everything else (embedding, norms, router, LM
// head) is replicated on every TP rank. A checkpoint holds whole tensors;
// these functions cut them into a TP rank's slices and join them back.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/model/param_layout.hpp"

namespace tutti::train {

// The axis along which tensor `name` (a dense tensor's name, or an expert
// block's as in expert_layout, with or without an "adam_m/"-style prefix)
// is split; -1 when every TP rank holds all of it.
int tp_split_axis(const std::string& name);

// `full` with each split tensor's split axis divided by `parts`: the
// layout of one TP rank's slices (offsets recomputed).
model::param_layout tp_local_layout(const model::param_layout& full,
                                    int64_t parts);

// Slice `part` of `parts` along `axis` of a tensor of `full_shape`.
void take_tp_part(const float* full, const std::vector<int64_t>& full_shape,
                  int axis, int64_t parts, int64_t part, float* out);

// The inverse: writes slice `part` into its place in `full`.
void put_tp_part(const float* slice, const std::vector<int64_t>& full_shape,
                 int axis, int64_t parts, int64_t part, float* full);

// Every tensor of `full_layout` cut to `part`'s slice (replicated ones
// copied): `full_values` in full_layout's order -> values in
// tp_local_layout's.
std::vector<float> take_tp_parts(const model::param_layout& full_layout,
                                 const float* full_values, int64_t parts,
                                 int64_t part);

// The inverse of take_tp_parts: `parts_values` holds every TP rank's
// values in tp_local_layout's order, part after part -> whole tensors in
// full_layout's order (replicated ones from part 0).
std::vector<float> join_tp_parts(const model::param_layout& full_layout,
                                 const float* parts_values, int64_t parts);

} // namespace tutti::train
