#include "rank/rank_checkpoint.hpp"

#include "rank/stage_gather.hpp"

#include <algorithm>
#include <filesystem>

#include "tutti/model/model_shape.hpp"
#include "tutti/model/param_layout.hpp"
#include "tutti/train/stage_layout.hpp"
#include "tutti/moe/staged_collectives.hpp"
#include "tutti/train/tensor_parallel.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/expert_blocks.hpp"

namespace tutti {

namespace {

// Every TP rank's `local` (the same size on each), part after part in TP
// order, on TP rank 0 only (empty elsewhere). `local` is consumed, so the
// host holds at most it and the parts, never a full-size buffer on the
// other TP ranks.
expected<std::vector<float>> tp_gather(comm::communicator& tp,
                                       const kernels::stream& s,
                                       std::vector<float> local) {
  const std::vector<int64_t> counts(tp.size(),
                                    static_cast<int64_t>(local.size()));
  kernels::tensor<float> mine;
  mine.upload(s, local);
  local = {};
  return gather_to_first(tp, s, std::move(mine), counts);
}

// A layout's values whole on TP rank 0 (empty on the other TP ranks): with
// tensor parallelism `local` (this TP rank's slices, in `full`'s
// tp_local_layout) joined with the other TP ranks'.
expected<std::vector<float>> whole_tensors(comm::communicator* tp,
                                           const kernels::stream& s,
                                           const model::param_layout& full,
                                           std::vector<float> local) {
  if (!tp)
    return local;
  auto parts = tp_gather(*tp, s, std::move(local));
  if (!parts.ok())
    return status::error(parts.message());
  if (tp->rank() != 0)
    return std::vector<float>{};
  return train::join_tp_parts(full, parts.value().data(), tp->size());
}

// An expert shard's snapshot with its blocks whole, on TP rank 0 (null on
// the other TP ranks): each TP rank holds a slice of every expert's
// intermediate dimension. The shard's snapshot is let go once its
// values are in the buffer sent.
expected<rank_snapshot_ptr> whole_experts(comm::communicator& tp,
                                          const kernels::stream& s,
                                          rank_snapshot_ptr shard) {
  std::vector<float> local;
  auto whole = std::make_shared<rank_snapshot>();
  whole->step = shard->step;
  whole->rank = shard->rank;
  whole->epoch = shard->epoch;
  whole->ints = shard->ints;
  whole->strings = shard->strings;
  struct spec {
    std::string name;
    std::vector<int64_t> shape;
    int64_t numel;
  };
  std::vector<spec> specs; // the shard's tensors, without their data
  size_t total = 0;
  for (const auto& t : shard->tensors)
    total += t.data.size();
  local.reserve(total);
  for (const auto& t : shard->tensors) {
    local.insert(local.end(), t.data.begin(), t.data.end());
    specs.push_back({t.name, t.shape, static_cast<int64_t>(t.data.size())});
  }
  shard.reset();
  const int64_t n = static_cast<int64_t>(local.size()), count = tp.size();
  auto parts = tp_gather(tp, s, std::move(local));
  if (!parts.ok())
    return status::error(parts.message());
  if (tp.rank() != 0)
    return rank_snapshot_ptr{};
  int64_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& t = specs[i];
    const int axis = train::tp_split_axis(t.name);
    auto shape = t.shape;
    const int64_t numel = t.numel;
    if (axis < 0) { // replicated: TP rank 0's own
      whole->tensors.push_back(
        {t.name, shape,
         std::vector<float>(parts.value().begin() + offset,
                            parts.value().begin() + offset + numel)});
      offset += numel;
      continue;
    }
    shape[axis] *= count;
    std::vector<float> data(numel * count);
    for (int64_t p = 0; p < count; ++p)
      train::put_tp_part(parts.value().data() + p * n + offset, shape, axis,
                         count, p, data.data());
    whole->tensors.push_back({t.name, shape, std::move(data)});
    offset += numel;
  }
  return rank_snapshot_ptr(std::move(whole));
}

// The dense tensors, whole: weights, AdamW moments (whole, however the
// optimizer is sharded or the weights split: a checkpoint resumes on any
// layout), router biases (copied to the host from wherever the model
// computes).
void add_dense(train::rank_model& model, const model::param_layout& layout,
               const std::vector<float>& params,
               const std::vector<float>& adam_m,
               const std::vector<float>& adam_v, const model_config& m,
               const moe_config& e, rank_snapshot& snap) {
  const auto& s = model.stream();
  for (const auto& spec : layout.tensors()) {
    snap.tensors.push_back(
      {spec.name, spec.shape,
       std::vector<float>(params.begin() + spec.offset,
                          params.begin() + spec.offset + spec.numel)});
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

// How the checkpoint's experts were written (which need not be this
// job's way): by ep_size EP members, member q into shard file q * stride
// (stage 0's TP index 0 ranks; TP innermost, they are tp apart).
// Checkpoints without the stride wrote them into files 0 .. ep_size - 1.
struct saved_experts {
  int64_t ep_size = 1;
  int64_t stride = 1;
  std::filesystem::path file(const std::filesystem::path& dir,
                             int64_t q) const {
    return dir / store::shard_file_name(q * stride);
  }
};

expected<saved_experts> saved_expert_files(const std::filesystem::path& dir,
                                           const job_config& cfg) {
  auto header = store::read_shard_file(dir / store::shard_file_name(0), false);
  if (!header.ok())
    return status::error(header.message());
  const auto& ints = header.value().meta.ints;
  saved_experts out;
  out.ep_size = ints.count("ep_size") ? ints.at("ep_size") : cfg.ep_size();
  if (ints.count("expert_file_stride"))
    out.stride = ints.at("expert_file_stride");
  return out;
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
  auto saved = saved_expert_files(dir, cfg);
  if (!saved.ok())
    return status::error(saved.message());
  for (int64_t q = 0; q < saved.value().ep_size; ++q) {
    const auto file = saved.value().file(dir, q);
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
        ids.push_back(static_cast<int32_t>(cfg.ep_member_of(a.rank) * count
                                           + j));
  auto where = index_experts(dir, cfg);
  if (!where.ok())
    return status::error(where.message());
  // The shard holds its pipeline stage's layers: rows l * count onward of
  // ids for each.
  const auto layers = train::layers_of_stage(cfg, cfg.pp_stage_of(a.rank));
  std::vector<int64_t> rows;
  for (int64_t l : layers.list())
    for (int64_t j = 0; j < count; ++j)
      rows.push_back(l * count + j);
  for (int64_t i : rows)
    if (where.value().shard[(i / count) * E + ids[i]] < 0)
      return status::error(dir.string() + ": no shard holds expert "
                           + std::to_string(ids[i]) + " of layer "
                           + std::to_string(i / count));
  // The blocks as the shard wants them, filled shard file by shard file.
  const auto layout = train::expert_layout_of_layers(cfg.model, count, layers);
  auto snap = std::make_shared<rank_snapshot>();
  snap->step = step;
  for (const auto& spec : layout.tensors())
    for (const char* prefix : {"", "adam_m/", "adam_v/"})
      snap->tensors.push_back({prefix + spec.name, spec.shape,
                               std::vector<float>(spec.numel)});
  int64_t filled = 0;
  auto saved = saved_expert_files(dir, cfg);
  if (!saved.ok())
    return status::error(saved.message());
  for (int64_t q = 0; q < saved.value().ep_size; ++q) {
    bool needed = false;
    for (int64_t i : rows)
      needed |= where.value().shard[(i / count) * E + ids[i]] == q;
    if (!needed)
      continue;
    auto file = store::read_shard_file(saved.value().file(dir, q));
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
  const auto expected = static_cast<int64_t>(rows.size()) * 9;
  if (filled != expected)
    return status::error(dir.string() + ": the checkpoint lacks some of rank "
                         + std::to_string(a.rank) + "'s experts ("
                         + std::to_string(filled) + " of "
                         + std::to_string(expected) + " rows)");
  if (cfg.tp_size() > 1) // this TP rank's slice of each expert
    for (auto& t : snap->tensors) {
      const int axis = train::tp_split_axis(t.name);
      auto part = t.shape;
      part[axis] /= cfg.tp_size();
      std::vector<float> data(t.data.size() / cfg.tp_size());
      train::take_tp_part(t.data.data(), t.shape, axis, cfg.tp_size(),
                          cfg.tp_rank_of(a.rank), data.data());
      t.shape = std::move(part);
      t.data = std::move(data);
    }
  return experts.restore(std::move(snap));
}

} // namespace

status take_snapshot(const rank_args& a, train::rank_model& model,
                     shard_executor& experts, int64_t step,
                     rank_snapshot_ptr& out) {
  auto snap = std::make_shared<rank_snapshot>();
  snap->step = step;
  snap->rank = a.rank;
  snap->ints["step"] = step;
  snap->ints["data_cursor"] = step; // batches are a pure function of step
  snap->ints["world_size"] = a.cfg.cluster.world_size;
  snap->ints["ep_size"] = a.cfg.ep_size();
  snap->ints["expert_file_stride"] = a.cfg.tp_size(); // saved_experts
  // Under pipeline parallelism each stage holds its own layers: the
  // stages' ranks of stage 0's (a one-stage job's writers) send theirs to
  // it, and it writes the whole model. All of a stage's ranks agree, so
  // its collectives below match.
  snap->epoch = a.epoch;
  const int64_t stage = a.cfg.pp_stage_of(a.rank);
  auto* pp = model.pp_group();
  // Every rank takes its part in gathering sharded moments, and the
  // first data-parallel rank of each TP index (and stage) in joining the
  // TP slices (and stages).
  std::vector<float> adam_m, adam_v;
  TUTTI_RETURN_IF_ERROR(model.full_moments(adam_m, adam_v));
  const auto full_dense = model::dense_layout(a.cfg.model, a.cfg.moe);
  std::vector<float> params;
  if (a.cfg.dp_rank_of(a.rank) == 0) {
    params = model.params().to_host(model.stream());
    for (auto* values : {&params, &adam_m, &adam_v}) {
      if (pp) {
        auto joined = join_stages(*pp, model.stream(), a.cfg,
                                  std::move(*values));
        if (!joined.ok())
          return status::error("checkpoint: " + joined.message());
        *values = std::move(joined.value());
      }
      if (stage > 0)
        continue;
      auto whole = whole_tensors(model.tp_group(), model.stream(), full_dense,
                                 std::move(*values));
      if (!whole.ok())
        return status::error("checkpoint: " + whole.message());
      *values = std::move(whole.value());
    }
  }
  if (a.rank == 0) {
    add_dense(model, full_dense, params, adam_m, adam_v, a.cfg.model,
              a.cfg.moe, *snap);
    // The model's shape travels with the weights, for `tutti export`.
    model::record_shape(a.cfg.model, a.cfg.moe, snap->ints, snap->strings);
  }
  // The first expert-data-parallel replica's experts; under tensor
  // parallelism each TP group of it joins its slices, and its TP index 0
  // writes them.
  if (a.cfg.dp_rank_of(a.rank) < a.cfg.ep_size()) {
    rank_snapshot_ptr shard;
    TUTTI_RETURN_IF_ERROR(experts.snapshot(step, shard));
    if (pp) {
      auto joined = join_stage_experts(*pp, model.stream(), a.cfg,
                                       std::move(shard));
      if (!joined.ok())
        return status::error("checkpoint: " + joined.message());
      shard = std::move(joined.value());
    }
    if (stage > 0) {
      out = std::move(snap);
      return {};
    }
    if (auto* tp = model.tp_group()) {
      auto whole = whole_experts(*tp, model.stream(), std::move(shard));
      if (!whole.ok())
        return status::error("checkpoint: " + whole.message());
      shard = std::move(whole.value());
    }
    if (a.cfg.tp_rank_of(a.rank) == 0) {
      for (const auto& [k, v] : shard->ints)
        snap->ints[k] = v;
      for (const auto& [k, v] : shard->strings)
        snap->strings[k] = v;
      snap->experts = std::move(shard);
    }
  }
  out = std::move(snap);
  return {};
}

status restore_snapshot(const rank_args& a, train::rank_model& model,
                        shard_executor& experts, int64_t step) {
  const auto dir = std::filesystem::path(a.cfg.checkpoint.root(a.cfg.run))
                   / store::checkpoint_dir_name(step);
  auto dense = store::read_shard_file(dir / store::shard_file_name(0));
  if (!dense.ok())
    return status::error(dense.message());
  TUTTI_RETURN_IF_ERROR(
    model::check_family(dense.value().meta, a.cfg.model.family, dir.string()));
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
  // Tensors are whole in the file: the model takes its stage's tensors,
  // its TP slices of them, and of the moments its optimizer slice.
  const auto full = train::stage_layout(
    model::dense_layout(a.cfg.model, a.cfg.moe), a.cfg,
    a.cfg.pp_stage_of(a.rank));
  const auto total = static_cast<size_t>(full.total());
  std::vector<float> params(total), adam_m(total), adam_v(total);
  for (const auto& spec : full.tensors())
    for (auto [prefix, target] : {std::pair{"", &params},
                                  std::pair{"adam_m/", &adam_m},
                                  std::pair{"adam_v/", &adam_v}}) {
      auto* t = find(dense.value(), prefix + spec.name);
      if (!t || static_cast<int64_t>(t->data.size()) != spec.numel)
        return status::error(dir.string() + ": shard 0 lacks " + prefix
                             + spec.name);
      std::copy(t->data.begin(), t->data.end(),
                target->begin() + spec.offset);
    }
  if (auto* tp = model.tp_group())
    for (auto* values : {&params, &adam_m, &adam_v})
      *values = train::take_tp_parts(full, values->data(), tp->size(),
                                     tp->rank());
  model.params().upload(model.stream(), params);
  model.load_moments(adam_m, adam_v);
  TUTTI_RETURN_IF_ERROR(load("router_bias", model.router_bias(), 0,
                             static_cast<int64_t>(model.router_bias().size())));

  return restore_experts(a, dir, step, experts);
}

} // namespace tutti
