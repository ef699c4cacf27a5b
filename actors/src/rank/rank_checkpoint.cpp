#include "rank/rank_checkpoint.hpp"

#include <algorithm>
#include <filesystem>

#include "tutti/model/param_layout.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/expert_blocks.hpp"

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

// Where each expert's rows are in the checkpoint: (layer, expert) -> (shard
// of EP rank q, row of its blocks). The shards' headers only.
struct expert_index {
  std::vector<int64_t> shard, row; // [layer * experts + expert]
};

expected<expert_index> index_experts(const std::filesystem::path& dir,
                                     const job_config& cfg) {
  const int64_t L = cfg.model.num_hidden_layers, E = cfg.moe.num_experts;
  expert_index out;
  out.shard.assign(L * E, -1);
  out.row.assign(L * E, -1);
  for (int64_t q = 0; q < cfg.ep_size(); ++q) {
    const auto file = dir / store::shard_file_name(q);
    auto header = store::read_shard_file(file, false);
    if (!header.ok())
      return status::error(header.message());
    auto held = store::block_experts_of(header.value().meta);
    if (!held.ok())
      return status::error(file.string() + ": " + held.message());
    const auto count = header.value().meta.ints.count("expert_count")
                         ? header.value().meta.ints.at("expert_count")
                         : cfg.experts_per_rank();
    for (int64_t l = 0; l < L; ++l)
      for (int64_t j = 0; j < count; ++j) {
        const auto e = held.value().at(l, j);
        if (e < 0 || e >= E)
          return status::error(file.string() + ": holds expert "
                               + std::to_string(e) + " of "
                               + std::to_string(E));
        out.shard[l * E + e] = q;
        out.row[l * E + e] = j;
      }
  }
  return out;
}

// The rank's expert blocks (weights and AdamW moments), each row taken
// from whichever shard of the checkpoint holds that expert: the checkpoint
// may come from another placement, and this is where experts move.
status restore_experts(const rank_args& a, const std::filesystem::path& dir,
                       int64_t step, shard_executor& experts) {
  const auto& cfg = a.cfg;
  const int64_t L = cfg.model.num_hidden_layers, E = cfg.moe.num_experts;
  const int64_t count = cfg.experts_per_rank();
  std::vector<int32_t> ids = a.expert_ids;
  if (ids.empty()) // the contiguous layout
    for (int64_t l = 0; l < L; ++l)
      for (int64_t j = 0; j < count; ++j)
        ids.push_back(static_cast<int32_t>((a.rank % cfg.ep_size()) * count
                                           + j));
  auto where = index_experts(dir, cfg);
  if (!where.ok())
    return status::error(where.message());
  for (int64_t i = 0; i < L * count; ++i)
    if (where.value().shard[(i / count) * E + ids[i]] < 0)
      return status::error(dir.string() + ": no shard holds expert "
                           + std::to_string(ids[i]) + " of layer "
                           + std::to_string(i / count));
  // The blocks as the shard wants them, filled shard file by shard file.
  const auto layout = model::expert_layout(cfg.model, 0, count);
  auto snap = std::make_shared<rank_snapshot>();
  snap->step = step;
  for (const auto& spec : layout.tensors())
    for (const char* prefix : {"", "adam_m/", "adam_v/"})
      snap->tensors.push_back({prefix + spec.name, spec.shape,
                               std::vector<float>(spec.numel)});
  int64_t filled = 0;
  for (int64_t q = 0; q < cfg.ep_size(); ++q) {
    bool needed = false;
    for (int64_t i = 0; i < L * count; ++i)
      needed |= where.value().shard[(i / count) * E + ids[i]] == q;
    if (!needed)
      continue;
    auto file = store::read_shard_file(dir / store::shard_file_name(q));
    if (!file.ok())
      return status::error(file.message());
    for (const auto& t : file.value().tensors) {
      owned_tensor* target = nullptr;
      for (auto& mine : snap->tensors)
        if (mine.name == t.name)
          target = &mine;
      if (target == nullptr || t.shape.size() != 3)
        continue; // dense tensors (shard 0), read by restore_snapshot
      const int64_t layer = [&] {
        for (int64_t l = 0; l < L; ++l)
          if (t.name.find(model::expert_block_name(l, "")) != std::string::npos)
            return l;
        return int64_t{-1};
      }();
      const int64_t per = t.shape[1] * t.shape[2];
      if (layer < 0 || target->shape[1] * target->shape[2] != per)
        return status::error(dir.string() + ": " + t.name + " of shard "
                             + std::to_string(q) + " does not fit the model");
      for (int64_t j = 0; j < count; ++j) {
        const auto e = ids[layer * count + j];
        if (where.value().shard[layer * E + e] != q)
          continue;
        const auto row = where.value().row[layer * E + e];
        if ((row + 1) * per > static_cast<int64_t>(t.data.size()))
          return status::error(dir.string() + ": " + t.name + " of shard "
                               + std::to_string(q) + " is short");
        std::copy_n(t.data.begin() + row * per, per,
                    target->data.data() + j * per);
        ++filled;
      }
    }
  }
  // Every row of every block: weights and both moments, three matrices.
  if (filled != L * count * 9)
    return status::error(dir.string() + ": the checkpoint lacks some of rank "
                         + std::to_string(a.rank) + "'s experts ("
                         + std::to_string(filled) + " of "
                         + std::to_string(L * count * 9) + " rows)");
  return experts.restore(std::move(snap));
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
    for (const auto& [k, v] : shard->strings)
      snap->strings[k] = v;
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

  return restore_experts(a, dir, step, experts);
}

} // namespace tutti
