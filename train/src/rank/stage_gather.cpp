// stage_gather.hpp: gathers to member 0, and the stages joined on stage 0.

#include "rank/stage_gather.hpp"

#include <algorithm>

#include "tutti/model/param_layout.hpp"
#include "tutti/train/stage_layout.hpp"
#include "tutti/moe/staged_collectives.hpp"
#include "tutti/train/tensor_parallel.hpp"

namespace tutti {

expected<std::vector<float>> gather_to_first(comm::communicator& group,
                                             const kernels::stream& s,
                                             kernels::tensor<float> mine,
                                             const std::vector<int64_t>& counts) {
  const bool first = group.rank() == 0;
  int64_t total = 0;
  for (auto c : counts)
    total += c;
  kernels::tensor<float> parts;
  parts.resize(s, static_cast<size_t>(first ? std::max<int64_t>(total, 1) : 1));
  std::vector<int64_t> send(group.size(), 0), recv(group.size(), 0);
  send[0] = counts.at(group.rank());
  if (first)
    recv = counts;
  moe::staged_collectives collectives(s);
  TUTTI_RETURN_IF_ERROR(collectives.all_to_all_v(
    group, mine.data(), send, first ? parts.data() : nullptr, recv));
  if (!first)
    return std::vector<float>{};
  mine = {};
  auto out = parts.to_host(s);
  out.resize(static_cast<size_t>(total));
  return out;
}

namespace {

// This TP rank's dense tensors of pipeline stage `stage`.
model::param_layout stage_dense(const job_config& cfg, int64_t stage) {
  return train::tp_local_layout(
    train::stage_layout(model::dense_layout(cfg.model, cfg.moe), cfg, stage),
    cfg.tp_size());
}

// This TP rank's expert blocks of stage `stage`'s layers.
model::param_layout stage_experts(const job_config& cfg, int64_t stage) {
  return train::tp_local_layout(
    train::expert_layout_of_layers(cfg.model, cfg.experts_per_rank(),
                         train::layers_of_stage(cfg, stage)),
    cfg.tp_size());
}

// Tensor `spec` of stage `owner`, sent to stage 0 (`local`: the owner's
// values, null elsewhere); its values on stage 0, empty elsewhere. One
// tensor at a time: stage 0 holds the whole and one tensor in flight.
expected<std::vector<float>> from_stage(comm::communicator& pp,
                                        const kernels::stream& s,
                                        int64_t owner,
                                        const model::tensor_spec& spec,
                                        const float* local) {
  std::vector<int64_t> counts(pp.size(), 0);
  counts[owner] = spec.numel;
  kernels::tensor<float> mine;
  mine.resize(s, 1); // a valid address where nothing is sent
  if (local)
    mine.upload(s, local, static_cast<size_t>(spec.numel));
  return gather_to_first(pp, s, std::move(mine), counts);
}

} // namespace

// A layout's values (`local`: this stage's tensors of stage_dense's
// layout, consumed) joined over the stages on stage 0, in the one-stage
// layout's order (each tensor from the stage that holds it: with
// interleaved stages a stage's tensors are not one run of it); empty on
// the other stages.
expected<std::vector<float>> join_stages(comm::communicator& pp,
                                         const kernels::stream& s,
                                         const job_config& cfg,
                                         std::vector<float> local) {
  const bool first = pp.rank() == 0;
  std::vector<model::param_layout> stages;
  for (int64_t stage = 0; stage < cfg.pp_size(); ++stage)
    stages.push_back(stage_dense(cfg, stage));
  std::vector<float> whole;
  if (first) {
    int64_t total = 0;
    for (const auto& layout : stages)
      total += layout.total();
    whole.reserve(static_cast<size_t>(total));
  }
  const auto one_stage = train::tp_local_layout(
    model::dense_layout(cfg.model, cfg.moe), cfg.tp_size());
  for (const auto& tensor : one_stage.tensors()) {
    int64_t owner = 0;
    while (owner < cfg.pp_size() && !stages[owner].find(tensor.name))
      ++owner;
    if (owner == cfg.pp_size())
      return status::error("no pipeline stage holds " + tensor.name);
    const auto& spec = stages[owner].at(tensor.name);
    if (owner == 0) {
      if (first)
        whole.insert(whole.end(), local.begin() + spec.offset,
                     local.begin() + spec.offset + spec.numel);
      continue;
    }
    auto got = from_stage(pp, s, owner, spec,
                          pp.rank() == owner ? local.data() + spec.offset
                                             : nullptr);
    if (!got.ok())
      return status::error(got.message());
    if (first)
      whole.insert(whole.end(), got.value().begin(), got.value().end());
  }
  return whole;
}

// Under pipeline parallelism each stage's expert shard holds its layers:
// their snapshots joined on stage 0 (null on the other stages), the whole
// model's layers in order, as a one-stage shard's, tensor by tensor. The
// stages' tensors are the same kind (expert_shard's take_snapshot: each
// block, then its two moments), so stage 0 names the others' from the
// config.
expected<rank_snapshot_ptr> join_stage_experts(comm::communicator& pp,
                                               const kernels::stream& s,
                                               const job_config& cfg,
                                               rank_snapshot_ptr shard) {
  const bool first = pp.rank() == 0;
  std::shared_ptr<rank_snapshot> joined;
  if (first) { // its own layers first, copied before the shard's go
    joined = std::make_shared<rank_snapshot>(*shard);
    shard.reset();
  }
  for (int64_t stage = 1; stage < cfg.pp_size(); ++stage) {
    size_t at = 0; // the owner's tensor, in its snapshot's order
    const auto layout = stage_experts(cfg, stage);
    for (const auto& spec : layout.tensors())
      for (const char* prefix : {"", "adam_m/", "adam_v/"}) {
        const float* mine = nullptr;
        if (pp.rank() == stage) {
          auto& t = shard->tensors.at(at);
          if (t.name != prefix + spec.name
              || static_cast<int64_t>(t.data.size()) != spec.numel)
            return status::error("stage " + std::to_string(stage)
                                 + "'s expert snapshot holds " + t.name
                                 + ", expected " + prefix + spec.name);
          mine = t.data.data();
        }
        ++at;
        auto got = from_stage(pp, s, stage, spec, mine);
        if (!got.ok())
          return status::error(got.message());
        if (first)
          joined->tensors.push_back(
            {prefix + spec.name, spec.shape, std::move(got.value())});
      }
  }
  if (!first)
    return rank_snapshot_ptr{};
  // In the one-stage shard's order, layer by layer (interleaved stages hold
  // runs of layers apart from each other); a layer's tensors stay as its
  // stage listed them.
  auto layer = [](const std::string& name) { // past "adam_m/" and the like
    const auto slash = name.find('/');
    return train::layer_of(slash == std::string::npos ? name
                                                      : name.substr(slash + 1));
  };
  std::stable_sort(joined->tensors.begin(), joined->tensors.end(),
                   [&](const auto& a, const auto& b) {
                     return layer(a.name) < layer(b.name);
                   });
  return rank_snapshot_ptr(std::move(joined));
}

} // namespace tutti
