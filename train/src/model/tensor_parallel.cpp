#include "tutti/train/tensor_parallel.hpp"

#include <algorithm>
#include <stdexcept>

#include "tutti/model/tensor_names.hpp"

namespace tutti::train {

namespace names = model::names;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size()
         && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A tensor as [outer, dim, inner] around its split axis.
struct around_axis {
  int64_t outer = 1, dim = 1, inner = 1;
};

around_axis split(const std::vector<int64_t>& shape, int axis, int64_t parts) {
  if (axis < 0 || axis >= static_cast<int>(shape.size())
      || shape[axis] % parts != 0)
    throw std::invalid_argument("tensor parallel: cannot split axis "
                                + std::to_string(axis) + " in "
                                + std::to_string(parts) + " parts");
  around_axis a;
  for (int i = 0; i < axis; ++i)
    a.outer *= shape[i];
  a.dim = shape[axis];
  for (size_t i = axis + 1; i < shape.size(); ++i)
    a.inner *= shape[i];
  return a;
}

} // namespace

int tp_split_axis(const std::string& name) {
  // MLA's per-head projections split by head too; its latents
  // (q_a_proj, kv_a_proj_with_mqa and their norms) are replicated. The
  // dense MLPs as the experts: the intermediate dimension split,
  // column-parallel in, row-parallel out.
  for (const char* column :
       {names::q_proj, names::k_proj, names::v_proj, names::q_b_proj,
        names::kv_b_proj, names::dense_gate, names::dense_up, names::shared_w1,
        names::shared_w3})
    if (ends_with(name, column))
      return 0;
  for (const char* row : {names::o_proj, names::dense_down, names::shared_w2})
    if (ends_with(name, row))
      return 1;
  // The embedding and the LM head [vocab, D] split by vocabulary
  // (Megatron's vocab-parallel embedding and output layer).
  if (ends_with(name, names::embed) || ends_with(name, names::lm_head))
    return 0;
  // Expert blocks [experts, F, D] and [experts, D, F].
  if (ends_with(name, "experts.w1") || ends_with(name, "experts.w3"))
    return 1;
  if (ends_with(name, "experts.w2"))
    return 2;
  return -1;
}

model::param_layout tp_local_layout(const model::param_layout& full,
                                    int64_t parts) {
  model::param_layout local;
  for (const auto& t : full.tensors()) {
    auto shape = t.shape;
    if (const int axis = tp_split_axis(t.name); axis >= 0 && parts > 1) {
      split(shape, axis, parts); // checks divisibility
      shape[axis] /= parts;
    }
    local.add(t.name, std::move(shape));
  }
  return local;
}

void take_tp_part(const float* full, const std::vector<int64_t>& full_shape,
                  int axis, int64_t parts, int64_t part, float* out) {
  const auto a = split(full_shape, axis, parts);
  const int64_t run = a.dim / parts * a.inner;
  for (int64_t o = 0; o < a.outer; ++o)
    std::copy_n(full + o * a.dim * a.inner + part * run, run, out + o * run);
}

void put_tp_part(const float* slice, const std::vector<int64_t>& full_shape,
                 int axis, int64_t parts, int64_t part, float* full) {
  const auto a = split(full_shape, axis, parts);
  const int64_t run = a.dim / parts * a.inner;
  for (int64_t o = 0; o < a.outer; ++o)
    std::copy_n(slice + o * run, run, full + o * a.dim * a.inner + part * run);
}

std::vector<float> take_tp_parts(const model::param_layout& full_layout,
                                 const float* full_values, int64_t parts,
                                 int64_t part) {
  const auto local = tp_local_layout(full_layout, parts);
  std::vector<float> out(local.total());
  for (size_t i = 0; i < full_layout.tensors().size(); ++i) {
    const auto& f = full_layout.tensors()[i];
    const auto& l = local.tensors()[i];
    const int axis = tp_split_axis(f.name);
    if (axis < 0 || parts == 1)
      std::copy_n(full_values + f.offset, f.numel, out.data() + l.offset);
    else
      take_tp_part(full_values + f.offset, f.shape, axis, parts, part,
                   out.data() + l.offset);
  }
  return out;
}

std::vector<float> join_tp_parts(const model::param_layout& full_layout,
                                 const float* parts_values, int64_t parts) {
  const auto local = tp_local_layout(full_layout, parts);
  std::vector<float> out(full_layout.total());
  for (size_t i = 0; i < full_layout.tensors().size(); ++i) {
    const auto& f = full_layout.tensors()[i];
    const auto& l = local.tensors()[i];
    const int axis = tp_split_axis(f.name);
    if (axis < 0 || parts == 1) {
      std::copy_n(parts_values + l.offset, f.numel, out.data() + f.offset);
      continue;
    }
    for (int64_t p = 0; p < parts; ++p)
      put_tp_part(parts_values + p * local.total() + l.offset, f.shape, axis,
                  parts, p, out.data() + f.offset);
  }
  return out;
}

} // namespace tutti::train
