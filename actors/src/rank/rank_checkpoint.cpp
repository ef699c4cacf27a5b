#include "rank/rank_checkpoint.hpp"

#include <algorithm>
#include <filesystem>

#include "tutti/store/checkpoint_files.hpp"

namespace tutti {

namespace {

// The dense tensors: weights, AdamW moments (whole, however the
// optimizer is sharded: a checkpoint resumes on any layout), router biases
// (copied to the host from wherever the model computes).
void add_dense(model::rank_model& model, const std::vector<float>& adam_m,
               const std::vector<float>& adam_v, const model_config& m,
               const moe_config& e, rank_snapshot& snap) {
  const auto& s = model.stream();
  for (const auto& spec : model.layout().tensors()) {
    std::vector<float> host(spec.numel);
    model.params().download(s, host.data(), spec.numel, spec.offset);
    snap.tensors.push_back({spec.name, spec.shape, std::move(host)});
    for (auto [prefix, source] : {std::pair{"adam_m/", &adam_m},
                                  std::pair{"adam_v/", &adam_v}})
      snap.tensors.push_back(
        {prefix + spec.name, spec.shape,
         std::vector<float>(source->begin() + spec.offset,
                            source->begin() + spec.offset + spec.numel)});
  }
  snap.tensors.push_back({"router_bias",
                          {m.num_hidden_layers, e.num_experts},
                          model.router_bias().to_host(s)});
}

} // namespace

status take_snapshot(const rank_args& a, model::rank_model& model,
                     shard_executor& experts, int64_t step,
                     rank_snapshot_ptr& out) {
  auto snap = std::make_shared<rank_snapshot>();
  snap->step = step;
  snap->rank = a.rank;
  snap->ints["step"] = step;
  snap->ints["data_cursor"] = step; // batches are a pure function of step
  snap->ints["world_size"] = a.cfg.cluster.world_size;
  snap->ints["ep_size"] = a.cfg.ep_size();
  // Every rank takes its part in gathering sharded moments.
  std::vector<float> adam_m, adam_v;
  TUTTI_RETURN_IF_ERROR(model.full_moments(adam_m, adam_v));
  if (a.rank == 0) {
    add_dense(model, adam_m, adam_v, a.cfg.model, a.cfg.moe, *snap);
    // The model's shape travels with the weights, for `tutti export`.
    const auto& m = a.cfg.model;
    const auto& e = a.cfg.moe;
    snap->ints["vocab_size"] = m.vocab_size;
    snap->ints["hidden_size"] = m.hidden_size;
    snap->ints["intermediate_size"] = m.intermediate_size;
    snap->ints["num_hidden_layers"] = m.num_hidden_layers;
    snap->ints["num_attention_heads"] = m.num_attention_heads;
    snap->ints["num_key_value_heads"] = m.num_key_value_heads;
    snap->ints["max_seq_len"] = m.max_seq_len;
    snap->ints["num_experts"] = e.num_experts;
    snap->ints["router_top_k"] = e.router_top_k;
    snap->strings["rope_theta"] = std::to_string(m.rope_theta);
    snap->strings["rms_norm_eps"] = std::to_string(m.rms_norm_eps);
    snap->strings["router_temperature"] = std::to_string(e.router_temperature);
  }
  if (a.rank < a.cfg.ep_size()) {
    rank_snapshot_ptr shard;
    TUTTI_RETURN_IF_ERROR(experts.snapshot(step, shard));
    for (const auto& t : shard->tensors)
      snap->tensors.push_back(t);
    for (const auto& [k, v] : shard->ints)
      snap->ints[k] = v;
  }
  snap->epoch = a.epoch;
  out = std::move(snap);
  return {};
}

status restore_snapshot(const rank_args& a, model::rank_model& model,
                        shard_executor& experts, int64_t step) {
  const auto dir = std::filesystem::path(a.cfg.checkpoint.root(a.cfg.run))
                   / store::checkpoint_dir_name(step);
  auto dense = store::read_shard_file(dir / store::shard_file_name(0));
  if (!dense.ok())
    return status::error(dense.message());
  auto find = [](const store::shard_file& f,
                 const std::string& name) -> const store::loaded_tensor* {
    for (const auto& t : f.tensors)
      if (t.name == name)
        return &t;
    return nullptr;
  };
  auto load = [&](const std::string& name, kernels::tensor<float>& target,
                  int64_t offset, int64_t numel) {
    auto* t = find(dense.value(), name);
    if (!t || static_cast<int64_t>(t->data.size()) != numel)
      return status::error(dir.string() + ": shard 0 lacks " + name);
    target.upload(model.stream(), t->data.data(), t->data.size(), offset);
    return status{};
  };
  // Moments are whole in the file; the model keeps its optimizer slice.
  const auto total = static_cast<size_t>(model.layout().total());
  std::vector<float> adam_m(total), adam_v(total);
  for (const auto& spec : model.layout().tensors()) {
    TUTTI_RETURN_IF_ERROR(
      load(spec.name, model.params(), spec.offset, spec.numel));
    for (auto [prefix, target] : {std::pair{"adam_m/", &adam_m},
                                  std::pair{"adam_v/", &adam_v}}) {
      auto* t = find(dense.value(), prefix + spec.name);
      if (!t || static_cast<int64_t>(t->data.size()) != spec.numel)
        return status::error(dir.string() + ": shard 0 lacks " + prefix
                             + spec.name);
      std::copy(t->data.begin(), t->data.end(),
                target->begin() + spec.offset);
    }
  }
  model.load_moments(adam_m, adam_v);
  TUTTI_RETURN_IF_ERROR(load("router_bias", model.router_bias(), 0,
                             static_cast<int64_t>(model.router_bias().size())));

  // This rank's experts were written by the first replica's holder.
  auto shard = store::read_shard_file(
    dir / store::shard_file_name(a.rank % a.cfg.ep_size()));
  if (!shard.ok())
    return status::error(shard.message());
  auto snap = std::make_shared<rank_snapshot>();
  snap->step = step;
  for (auto& t : shard.value().tensors)
    snap->tensors.push_back({t.name, t.shape, std::move(t.data)});
  return experts.restore(std::move(snap));
}

} // namespace tutti
