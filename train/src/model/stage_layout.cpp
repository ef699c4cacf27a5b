#include "tutti/train/stage_layout.hpp"

#include <cstdlib>

#include "tutti/model/tensor_names.hpp"

namespace tutti::train {

namespace names = model::names;

bool stage_layers::holds(int64_t layer) const {
  for (const auto& c : chunks)
    if (layer >= c.first && layer < c.last)
      return true;
  return false;
}

std::vector<int64_t> stage_layers::list() const {
  std::vector<int64_t> out;
  for (const auto& c : chunks)
    for (int64_t l = c.first; l < c.last; ++l)
      out.push_back(l);
  return out;
}

stage_layers layers_of_stage(const job_config& cfg, int64_t stage) {
  const int64_t v = cfg.cluster.pipeline_virtual_stages;
  if (v > 1) { // chunk c is virtual stage c * pp + stage
    const int64_t pp = cfg.pp_size();
    const auto counts = cfg.chunk_layer_counts();
    stage_layers out;
    int64_t first = 0;
    for (int64_t k = 0; k < pp * v; ++k) {
      const int64_t n = counts[static_cast<size_t>(k)];
      if (k % pp == stage)
        out.chunks.push_back({first, first + n});
      first += n;
    }
    return out;
  }
  const auto counts = cfg.stage_layer_counts();
  int64_t first = 0;
  for (int64_t s = 0; s < stage; ++s)
    first += counts[static_cast<size_t>(s)];
  return {{{first, first + counts[static_cast<size_t>(stage)]}}};
}

int64_t layer_of(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0)
    return -1;
  return std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
}

model::param_layout stage_layout(const model::param_layout& dense,
                                 const job_config& cfg, int64_t stage) {
  const auto layers = layers_of_stage(cfg, stage);
  const bool first = stage == 0, last = stage + 1 == cfg.pp_size();
  model::param_layout out;
  for (const auto& t : dense.tensors()) {
    const int64_t l = layer_of(t.name);
    const bool mine = l >= 0 ? layers.holds(l)
                      : t.name == names::embed ? first
                                               : last;
    if (mine)
      out.add(t.name, t.shape);
  }
  return out;
}

model::param_layout expert_layout_of_layers(const model_config& m,
                                            int64_t count,
                                            const stage_layers& layers) {
  model::param_layout p;
  const int64_t d = m.hidden_size, f = m.intermediate_size;
  for (int64_t l : layers.list()) {
    p.add(model::expert_block_name(l, "w1"), {count, f, d});
    p.add(model::expert_block_name(l, "w3"), {count, f, d});
    p.add(model::expert_block_name(l, "w2"), {count, d, f});
  }
  return p;
}

} // namespace tutti::train
