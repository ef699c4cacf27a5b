#include "initial_weights.hpp"

#include <string>

#include "tutti/model/model_shape.hpp"
#include "tutti/model/param_layout.hpp"

namespace tutti::cli {

void initial_weights(const job_config& cfg,
                     std::vector<store::named_tensor>& tensors,
                     store::shard_meta& meta) {
  const auto& m = cfg.model;
  const auto& e = cfg.moe;
  const auto dense = model::dense_layout(m, e);
  std::vector<float> values(dense.total());
  model::init_params(dense, values.data(), cfg.train.seed, m.init_std);
  for (const auto& t : dense.tensors())
    tensors.push_back(
      {t.name, t.shape,
       std::vector<float>(values.begin() + t.offset,
                          values.begin() + t.offset + t.numel)});
  const int64_t E = e.num_experts;
  const auto experts = model::expert_layout(m, 0, E);
  std::vector<float> ev(experts.total());
  model::init_expert_params(experts, ev.data(), m, 0, E, cfg.train.seed,
                            m.init_std);
  for (const auto& t : experts.tensors()) {
    // A leading dense layer has no experts (training's unused block aside).
    if (std::stoll(t.name.substr(13))
        < e.first_k_dense_replace) // model.layers.
      continue;
    // A block [experts, out, in]: one tensor per expert, as export writes.
    const auto which = t.name.substr(t.name.rfind('.') + 1);
    const auto prefix = t.name.substr(0, t.name.rfind('.'));
    const int64_t per = t.shape[1] * t.shape[2];
    for (int64_t j = 0; j < E; ++j)
      tensors.push_back(
        {prefix + "." + std::to_string(j) + "." + which + ".weight",
         {t.shape[1], t.shape[2]},
         std::vector<float>(ev.begin() + t.offset + j * per,
                            ev.begin() + t.offset + (j + 1) * per)});
  }
  meta.rank = 0;
  meta.step = 0;
  model::record_shape(m, e, meta.ints, meta.strings);
}

} // namespace tutti::cli
