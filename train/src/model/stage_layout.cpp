#include "tutti/train/stage_layout.hpp"

#include <cstdlib>

#include "tutti/model/tensor_names.hpp"

namespace tutti::train {

namespace names = model::names;

layer_range stage_layers(const job_config& cfg, int64_t stage) {
  const auto counts = cfg.stage_layer_counts();
  int64_t first = 0;
  for (int64_t s = 0; s < stage; ++s)
    first += counts[static_cast<size_t>(s)];
  return {first, first + counts[static_cast<size_t>(stage)]};
}

int64_t layer_of(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0)
    return -1;
  return std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
}

model::param_layout stage_layout(const model::param_layout& dense,
                                 const job_config& cfg, int64_t stage) {
  const auto layers = stage_layers(cfg, stage);
  const bool first = stage == 0, last = stage + 1 == cfg.pp_size();
  model::param_layout out;
  for (const auto& t : dense.tensors()) {
    const int64_t l = layer_of(t.name);
    const bool mine = l >= 0 ? l >= layers.first && l < layers.last
                      : t.name == names::embed ? first
                                               : last;
    if (mine)
      out.add(t.name, t.shape);
  }
  return out;
}

model::param_layout expert_layout_of_layers(const model_config& m,
                                            int64_t count, layer_range layers) {
  model::param_layout p;
  const int64_t d = m.hidden_size, f = m.intermediate_size;
  for (int64_t l = layers.first; l < layers.last; ++l) {
    p.add(model::expert_block_name(l, "w1"), {count, f, d});
    p.add(model::expert_block_name(l, "w3"), {count, f, d});
    p.add(model::expert_block_name(l, "w2"), {count, d, f});
  }
  return p;
}

} // namespace tutti::train
