// rank_model: construction, the forward/backward driver, the LM head and
// loss, the optimizer. The attention and MoE blocks live in their own files.

#include "tutti/model/tensor_names.hpp"
#include "tutti/train/rank_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "tutti/comm/slices.hpp"
#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/capacity_plan.hpp"
#include "tutti/train/pipeline_order.hpp"
#include "tutti/train/stage_layout.hpp"
#include "tutti/train/tensor_parallel.hpp"

namespace tutti::train {

namespace k = tutti::kernels;
namespace names = model::names;

double learning_rate(const train_config& t, int64_t step) {
  if (t.warmup_steps > 0 && step <= t.warmup_steps)
    return t.lr * static_cast<double>(step) / t.warmup_steps;
  const int64_t decay_steps = t.steps - t.warmup_steps;
  if (decay_steps <= 0)
    return t.lr;
  double progress = static_cast<double>(step - t.warmup_steps) / decay_steps;
  progress = std::min(1.0, std::max(0.0, progress));
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));
}

rank_model::rank_model(const job_config& cfg, comm_groups comms,
                       expert_executor& experts, kernels::stream where,
                       std::vector<int32_t> slot_of_expert)
  : cfg_(cfg), comms_(comms), experts_(experts), stream_(where),
    collectives_(where), layout_(tp_local_layout(
                           stage_layout(model::dense_layout(cfg.model, cfg.moe),
                                        cfg, comms.pp ? comms.pp->rank() : 0),
                           cfg.tp_size())),
    heads_(cfg.model.num_attention_heads / cfg.tp_size()),
    kv_heads_(cfg.model.num_key_value_heads / cfg.tp_size()) {
  const int64_t tp = comms_.tp ? comms_.tp->size() : 1;
  if (tp != cfg.tp_size())
    throw std::invalid_argument("rank_model: the TP group has "
                                + std::to_string(tp) + " members, the config "
                                + std::to_string(cfg.tp_size()));
  vocab_rows_ = cfg.model.vocab_size / tp;
  vocab_first_ = (comms_.tp ? comms_.tp->rank() : 0) * vocab_rows_;
  if (!slot_of_expert.empty()) {
    if (static_cast<int64_t>(slot_of_expert.size())
        != cfg.model.num_hidden_layers * cfg.moe.num_experts)
      throw std::invalid_argument("rank_model: the placement must give a slot "
                                  "for every layer's experts");
    slot_of_expert_.upload(stream_, slot_of_expert);
  }
  {
    // This stage's tensors whole (initialised by name: the values of the
    // whole model's), then this TP rank's slices of them: every layout
    // starts from the same weights.
    const auto full = stage_layout(model::dense_layout(cfg.model, cfg.moe), cfg,
                                   comms_.pp ? comms_.pp->rank() : 0);
    std::vector<float> init(full.total());
    model::init_params(full, init.data(), cfg.train.seed, cfg.model.init_std);
    if (tp > 1)
      init = take_tp_parts(full, init.data(), tp, comms_.tp->rank());
    params_.upload(stream_, init);
  }
  grads_.zeros(stream_, layout_.total());
  const int world = comms_.dp->size();
  sharded_ = cfg.train.optimizer_sharding && world > 1;
  plan_norm_pieces();
  const auto slice = sharded_ ? comm::member_slice(layout_.total(), world,
                                                   comms_.dp->rank())
                              : comm::slice{0, layout_.total()};
  opt_first_ = slice.first;
  opt_count_ = slice.count;
  moments_.zeros(stream_, static_cast<size_t>(opt_count_),
                 cfg.train.precision.moments);
  router_bias_.zeros(stream_,
                     cfg.model.num_hidden_layers * cfg.moe.num_experts);
  const int64_t layers = cfg.model.num_hidden_layers;
  acts_.resize(layers);
  stages_ = comms_.pp ? comms_.pp->size() : 1;
  stage_ = comms_.pp ? comms_.pp->rank() : 0;
  if (stages_ != cfg.pp_size())
    throw std::invalid_argument(
      "rank_model: the pipeline group has " + std::to_string(stages_)
      + " stages, the config " + std::to_string(cfg.pp_size()));
  layers_ = layers_of_stage(cfg, stage_);
  expert_forward_of_.assign(layers, -1);
  counts_step_.assign(layers, std::vector<int64_t>(cfg.moe.num_experts, 0));
  counts_step_dev_.resize(layers);
  for (auto& c : counts_step_dev_)
    c.zeros(stream_, cfg.moe.num_experts);
  {
    moe::exchange_options o;
    o.rack_aware = cfg.moe.rack_aware_alltoall;
    if (o.rack_aware) {
      // This rank's place in the world (job_config's order: stage, TP
      // index, data-parallel index) names its EP group's nodes.
      const int64_t world_rank =
        cfg.rank_at(comms_.pp ? comms_.pp->rank() : 0, comms_.dp->rank(),
                    comms_.tp ? comms_.tp->rank() : 0);
      o.racks = moe::rack_layout::of_group(cfg, world_rank);
    }
    o.combine_chunks = combine_chunk_count(cfg);
    o.dispatch = cfg.moe.dispatch;
    auto made = moe::make_token_exchange(*comms_.ep, where, o);
    if (!made.ok())
      throw std::invalid_argument("rank_model: " + made.error().message());
    exchange_ = std::move(made.value());
  }

  const auto& m = cfg.model;
  micro_seqs_ = cfg.train.global_batch_size / cfg.dp_size()
                / cfg.train.micro_batches;
  const int64_t seqs = micro_seqs_;
  const int64_t s = cfg.train.seq_len, n = seqs * s, d = m.hidden_size;
  const int64_t hd = core_head_dim(), e = cfg.moe.num_experts;
  const int64_t kk = cfg.moe.router_top_k;
  const auto& st = stream_;
  const auto mode = cfg.train.recompute;
  // What a layer needs while it runs; `core`: the attention core's part.
  auto size_working = [&](layer_acts& a, bool rest, bool core) {
    if (core)
      a.attn_saved.resize(st, seqs * heads_
                                * k::attention_saved_per_head(st.device, s));
    if (!rest)
      return;
    for (auto* buf : {&a.xn1, &a.x_mid, &a.xn2})
      buf->resize(st, n * d);
    a.rstd1.resize(st, n);
    a.rstd2.resize(st, n);
    a.q.resize(st, n * heads_ * hd);
    a.attn.resize(st, n * heads_ * hd);
    a.k.resize(st, n * kv_heads_ * hd);
    a.v.resize(st, n * kv_heads_ * hd);
    if (m.mla()) {
      a.mla.resize(st, mla_dims(seqs));
      a.attn_packed.resize(st, n * heads_ * m.v_head_dim);
    }
    if (m.qk_norm()) {
      a.q_pre.resize(st, n * heads_ * hd);
      a.k_pre.resize(st, n * kv_heads_ * hd);
      a.rstd_q.resize(st, n * heads_);
      a.rstd_k.resize(st, n * kv_heads_);
    }
    a.logits.resize(st, n * e);
    a.rprobs.resize(st, n * e);
    a.gate.resize(st, n * kk);
    a.topk_orig.resize(st, n * kk);
    a.topk_kept.resize(st, n * kk);
    a.slot_of_row.resize(st, n * kk);
    a.kept.resize(st, e);
  };
  // This stage's layers, and the input of the layer after each of its
  // chunks (the chunk's output, sent on).
  auto size_layers = [&](std::vector<layer_acts>& acts) {
    acts.resize(layers);
    for (int64_t l : layers_.list()) {
      auto& a = acts[l];
      a.x_in.resize(st, n * d);
      size_working(a, mode != recompute_mode::full,
                   mode == recompute_mode::none);
      a.counts_global.assign(e, 0);
      a.fraction.resize(st, e);
    }
    for (const auto& c : layers_.chunks)
      if (c.last < layers)
        acts[c.last].x_in.resize(st, n * d);
  };
  size_layers(acts_);
  // 1F1B keeps at most (stages - stage) micro-batches in flight; the
  // interleaved schedule more (pipeline_order.hpp).
  const int64_t in_flight = micro_batches_in_flight(
    stages_, static_cast<int64_t>(chunks()), cfg.train.micro_batches, stage_);
  slots_.resize(static_cast<size_t>(in_flight));
  for (size_t i = 1; i < slots_.size(); ++i)
    size_layers(slots_[i].acts);
  if (stages_ > 1) {
    aux_terms_.assign(cfg.train.micro_batches * layers, 0.0);
    z_terms_.assign(cfg.train.micro_batches * layers, 0.0);
  }

  if (mode != recompute_mode::none)
    size_working(work_, mode == recompute_mode::full, true);
  // communication_buffer_size: auto sizes the receive side of dispatch from
  // capacity (or the dropless worst case) up front, so steps do not grow it.
  const int64_t rows = cfg.moe.communication_buffer_size > 0
                         ? cfg.moe.communication_buffer_size
                             / static_cast<int64_t>(d * sizeof(float))
                         : dispatch_buffer_rows(cfg);
  for (auto* buf : {&dexp_in_, &dexp_out_})
    buf->reserve(st, rows * d);
  exchange_->reserve(rows, d);
  drows_.reserve(st, n * kk * d);
  x_final_.resize(st, n * d);
  xnf_.resize(st, n * d);
  rstdf_.resize(st, n);
  logits_out_.resize(st, n * vocab_rows_);
  lse_.resize(st, n);
}

double rank_model::aux_coeff() const {
  return cfg_.moe.aux_loss_coeff
         / static_cast<double>(cfg_.train.micro_batches);
}

double rank_model::z_coeff() const {
  return cfg_.moe.z_loss_coeff / static_cast<double>(cfg_.train.micro_batches);
}

float* rank_model::param(const std::string& name) {
  return params_.data() + layout_.at(name).offset;
}

float* rank_model::grad(const std::string& name) {
  return grads_.data() + layout_.at(name).offset;
}

std::string rank_model::layer_name(int64_t l, const char* suffix) const {
  return names::layer(l, suffix);
}

void rank_model::use_slot(int64_t i) {
  const auto next = static_cast<int64_t>(i
                                         % static_cast<int64_t>(slots_.size()));
  // Kept, the expert shard holds each slot's forward for its backward.
  experts_.use_slot(keeps_expert_activations() ? next : 0);
  if (next == slot_)
    return;
  auto park = [&](slot& s) {
    std::swap(acts_, s.acts);
    std::swap(inputs_, s.inputs);
    std::swap(targets_, s.targets);
  };
  park(slots_[slot_]); // the current one back to its slot
  park(slots_[next]);
  slot_ = next;
}

status rank_model::forward(const int32_t* inputs, const int32_t* targets,
                           int64_t seqs, double& ce_sum, step_stats* stats,
                           step_timers& time) {
  const auto& m = cfg_.model;
  const int64_t n = seqs * cfg_.train.seq_len, d = m.hidden_size;
  global_tokens_ = n * comms_.dp->size();
  ce_sum = 0;
  if (runs_embedding()) {
    inputs_.upload(stream_, inputs, n);
    TUTTI_RETURN_IF_ERROR(embed_forward(inputs, n, time));
  }
  for (int64_t l = chunk().first; l < chunk().last; ++l) {
    swap_working(acts_[l]);
    TUTTI_RETURN_IF_ERROR(attention_forward(l, seqs, time));
    TUTTI_RETURN_IF_ERROR(moe_forward(l, n, stats, time));
    swap_working(acts_[l]);
  }
  if (!runs_head())
    return {};
  targets_.upload(stream_, targets, n);
  k::rmsnorm_forward(stream_, x_final_.data(), param(names::final_norm),
                     xnf_.data(), rstdf_.data(), n, d,
                     static_cast<float>(m.rms_norm_eps));
  k::linear_forward(stream_, xnf_.data(), param(names::lm_head),
                    logits_out_.data(), n, d, vocab_rows_);
  return head_loss(targets, n, ce_sum);
}

status rank_model::backward(int64_t seqs, step_timers& time) {
  const auto& m = cfg_.model;
  const int64_t n = seqs * cfg_.train.seq_len, d = m.hidden_size;
  dx_.resize(stream_, n * d); // keeps what the next stage sent
  dtmp_.resize(stream_, n * d);
  if (runs_head()) {
    TUTTI_RETURN_IF_ERROR(head_backward(n, time));
    k::rmsnorm_backward(stream_, x_final_.data(), param(names::final_norm),
                        rstdf_.data(), dtmp_.data(), dx_.data(),
                        grad(names::final_norm), n, d);
  }
  for (int64_t l = chunk().last - 1; l >= chunk().first; --l) {
    swap_working(acts_[l]);
    TUTTI_RETURN_IF_ERROR(recompute(l, seqs, time));
    TUTTI_RETURN_IF_ERROR(moe_backward(l, n, dx_, time));
    TUTTI_RETURN_IF_ERROR(attention_backward(l, seqs, dx_, time));
    swap_working(acts_[l]);
  }
  if (!runs_embedding())
    return {}; // dx_ goes to the stage before
  embed_backward(n);
  return {};
}

void rank_model::swap_working(layer_acts& a) {
  const auto mode = cfg_.train.recompute;
  if (mode == recompute_mode::none)
    return;
  std::swap(a.attn_saved, work_.attn_saved);
  if (mode != recompute_mode::full)
    return;
  using pair = std::pair<tensor<float>*, tensor<float>*>;
  for (auto [mine, shared] :
       std::initializer_list<pair>{{&a.xn1, &work_.xn1},
                                   {&a.rstd1, &work_.rstd1},
                                   {&a.q, &work_.q},
                                   {&a.k, &work_.k},
                                   {&a.q_pre, &work_.q_pre},
                                   {&a.k_pre, &work_.k_pre},
                                   {&a.rstd_q, &work_.rstd_q},
                                   {&a.rstd_k, &work_.rstd_k},
                                   {&a.v, &work_.v},
                                   {&a.attn, &work_.attn},
                                   {&a.x_mid, &work_.x_mid},
                                   {&a.xn2, &work_.xn2},
                                   {&a.rstd2, &work_.rstd2},
                                   {&a.logits, &work_.logits},
                                   {&a.rprobs, &work_.rprobs},
                                   {&a.gate, &work_.gate},
                                   {&a.y_rows, &work_.y_rows},
                                   {&a.attn_packed, &work_.attn_packed},
                                   {&a.mlp_gate, &work_.mlp_gate},
                                   {&a.mlp_up, &work_.mlp_up},
                                   {&a.mlp_h, &work_.mlp_h}})
    std::swap(*mine, *shared);
  std::swap(a.mla, work_.mla);
  std::swap(a.topk_orig, work_.topk_orig);
  std::swap(a.topk_kept, work_.topk_kept);
  std::swap(a.slot_of_row, work_.slot_of_row);
  std::swap(a.kept, work_.kept);
  std::swap(a.exchange, work_.exchange);
}

// The same kernels on the same inputs as the forward pass: the rebuilt
// activations, and so every gradient and loss, are bit for bit those a run
// that kept them computes. Full recomputation repeats the layer's dispatch
// (routing statistics are not counted twice: no step_stats).
status rank_model::recompute(int64_t l, int64_t seqs, step_timers& time) {
  switch (cfg_.train.recompute) {
  case recompute_mode::none:
    return {};
  case recompute_mode::selective: {
    attention_core_forward(acts_[l], seqs);
    return {};
  }
  case recompute_mode::full:
    TUTTI_RETURN_IF_ERROR(attention_forward(l, seqs, time));
    return moe_forward(l, seqs * cfg_.train.seq_len, nullptr, time);
  }
  return {};
}

status rank_model::train_step(const int32_t* inputs, const int32_t* targets,
                              int64_t seqs, step_stats& stats) {
  const auto& e = cfg_.moe;
  stats.expert_counts.assign(cfg_.model.num_hidden_layers * e.num_experts, 0);
  stats.aux_loss = stats.z_loss = 0;
  stats.dropped_tokens = 0;
  exchange_->reset_bytes();
  for (auto& c : counts_step_)
    std::fill(c.begin(), c.end(), 0);
  const int64_t micro = cfg_.train.micro_batches;
  if (seqs != micro_seqs_ * micro)
    return status::error("train_step: " + std::to_string(seqs)
                         + " sequences, expected "
                         + std::to_string(micro_seqs_ * micro));
  const int64_t tokens = micro_seqs_ * cfg_.train.seq_len;
  double ce_sum = 0;
  if (stages_ > 1) {
    {
      scoped_timer t(stats.time.pipeline_schedule_s);
      TUTTI_RETURN_IF_ERROR(
        chunks() > 1 ? interleaved_step(inputs, targets, stats, ce_sum)
                     : pipeline_step(inputs, targets, stats, ce_sum));
    }
    TUTTI_RETURN_IF_ERROR(pipeline_sums(stats, ce_sum));
  } else {
    for (int64_t i = 0; i < micro; ++i) {
      double ce = 0;
      micro_ = i;
      TUTTI_RETURN_IF_ERROR(forward(inputs + i * tokens, targets + i * tokens,
                                    micro_seqs_, ce, &stats, stats.time));
      TUTTI_RETURN_IF_ERROR(backward(micro_seqs_, stats.time));
      ce_sum += ce;
    }
  }
  const int64_t step_tokens = global_tokens_ * micro;
  // One all-reduce for the scalars every rank reports identically.
  double sums[5] = {ce_sum, stats.aux_loss, stats.z_loss,
                    static_cast<double>(stats.dropped_tokens),
                    stats.stop_votes};
  {
    scoped_timer t(stats.time.allreduce_s);
    TUTTI_RETURN_IF_ERROR(comms_.dp->all_reduce_sum(sums, 5));
  }
  stats.stop_votes = sums[4];
  stats.tokens = step_tokens;
  stats.alltoall_bytes_to = exchange_->bytes_to();
  stats.alltoall_bytes = std::accumulate(
    stats.alltoall_bytes_to.begin(), stats.alltoall_bytes_to.end(), int64_t{0});
  stats.loss = sums[0] / static_cast<double>(step_tokens);
  stats.aux_loss = sums[1];
  stats.z_loss = sums[2];
  stats.dropped_tokens = static_cast<int64_t>(sums[3]);
  return {};
}

status rank_model::evaluate(const int32_t* inputs, const int32_t* targets,
                            int64_t seqs, double& loss_sum, int64_t& tokens,
                            step_timers& time) {
  const int64_t s = cfg_.train.seq_len;
  double ce_sum = 0;
  tokens = 0;
  if (chunks() > 1)
    TUTTI_RETURN_IF_ERROR(
      interleaved_evaluate(inputs, targets, seqs, ce_sum, tokens, time));
  else if (stages_ > 1)
    TUTTI_RETURN_IF_ERROR(
      pipeline_evaluate(inputs, targets, seqs, ce_sum, tokens, time));
  else
    for (int64_t first = 0; first < seqs; first += micro_seqs_) {
      const int64_t count = std::min(micro_seqs_, seqs - first);
      double ce = 0;
      TUTTI_RETURN_IF_ERROR(forward(inputs + first * s, targets + first * s,
                                    count, ce, nullptr, time));
      ce_sum += ce;
      tokens += global_tokens_;
    }
  {
    scoped_timer t(time.allreduce_s);
    TUTTI_RETURN_IF_ERROR(comms_.dp->all_reduce_sum(&ce_sum, 1));
  }
  loss_sum = ce_sum;
  return {};
}

status rank_model::reduce_dense_grads(double& sum_squares, step_timers& time) {
  k::wait(stream_); // queued kernels count as compute
  auto& world = *comms_.dp;
  {
    // The data group may be the EP group, whose waiting members lend.
    collective_timer t(time.allreduce_s, time, world);
    // Sharded: only this rank's optimizer slice is summed. Under pipeline
    // parallelism each stage sums its own tensors only.
    if (sharded_)
      TUTTI_RETURN_IF_ERROR(
        collectives_.reduce_scatter_sum(world, grads_.data(), grads_.size()));
    else
      TUTTI_RETURN_IF_ERROR(
        collectives_.all_reduce_sum(world, grads_.data(), grads_.size()));
  }
  return dense_sum_squares(sum_squares, time);
}

// The pieces of the one-stage, one-slice-per-member buffer (tp_local_layout
// of the whole model): every tensor cut where a data-parallel member's
// optimizer slice begins. Each piece is summed by one rank of the layout
// (its stage's, its optimizer slice's, TP rank 0 for a replicated tensor;
// a split one by every TP rank), so the sum over the pieces in order is
// the same bits on every layout that keeps the data-parallel size.
void rank_model::plan_norm_pieces() {
  const auto whole = tp_local_layout(model::dense_layout(cfg_.model, cfg_.moe),
                                     cfg_.tp_size());
  const int members = comms_.dp->size();
  std::vector<int64_t> cuts;
  for (int p = 1; p < members; ++p)
    cuts.push_back(comm::member_slice(whole.total(), members, p).first);
  norm_pieces_.clear();
  size_t next_cut = 0;
  for (const auto& t : whole.tensors()) {
    const auto* mine = layout_.find(t.name);
    const bool split = tp_split_axis(t.name) >= 0;
    int64_t lo = t.offset;
    const int64_t end = t.offset + t.numel;
    while (lo < end) {
      while (next_cut < cuts.size() && cuts[next_cut] <= lo)
        ++next_cut;
      const int64_t hi = next_cut < cuts.size() ? std::min(end, cuts[next_cut])
                                                : end;
      norm_pieces_.push_back(
        {mine ? mine->offset + (lo - t.offset) : -1, hi - lo, split});
      lo = hi;
    }
  }
  if (!sharded_)
    return;
  // This stage's optimizer slices (the buffer is the stage's tensors only
  // under pipeline parallelism; the whole model's otherwise, and then no
  // piece crosses a cut).
  for (int p = 1; p < members; ++p) {
    const int64_t cut = comm::member_slice(layout_.total(), members, p).first;
    for (auto& piece : norm_pieces_)
      if (piece.local >= 0 && piece.local < cut
          && cut < piece.local + piece.count)
        piece.straddles = true;
  }
}

status rank_model::dense_sum_squares(double& sum_squares, step_timers& time) {
  std::vector<double> parts(norm_pieces_.size(), 0.0);
  const bool tp_first = !comms_.tp || comms_.tp->rank() == 0;
  const int64_t lo = opt_first_, hi = opt_first_ + opt_count_;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& p = norm_pieces_[i];
    const bool mine = p.local >= 0
                      && (!sharded_ || (p.local >= lo && p.local < hi))
                      && (p.split || tp_first);
    if (p.straddles) {
      // Every dp rank keeps its summed part of the piece and zeroes the
      // rest (the optimizer reads only its own slice; the step zeroes the
      // gradients after): the all-reduce adds each value to zeros, so the
      // piece is whole on every rank, exactly as the unsharded sum.
      const int64_t end = p.local + p.count;
      const int64_t a = std::clamp(lo, p.local, end);
      const int64_t b = std::clamp(hi, p.local, end);
      k::fill_zero(stream_, grads_.data() + p.local, a - p.local);
      k::fill_zero(stream_, grads_.data() + b, end - b);
      scoped_timer t(time.allreduce_s);
      TUTTI_RETURN_IF_ERROR(collectives_.all_reduce_sum(
        *comms_.dp, grads_.data() + p.local, static_cast<size_t>(p.count)));
    }
    if (mine)
      parts[i] = k::sum_squares(stream_, grads_.data() + p.local, p.count);
  }
  // Each piece's value is on one rank of each group (a split piece's TP
  // slices aside, which every layout sums over the same TP group): the
  // sums add it to zeros, exactly.
  {
    scoped_timer t(time.allreduce_s);
    for (auto* group : {sharded_ ? comms_.dp : nullptr, comms_.tp, comms_.pp})
      if (group)
        TUTTI_RETURN_IF_ERROR(
          group->all_reduce_sum(parts.data(), parts.size()));
  }
  sum_squares = 0;
  for (double part : parts)
    sum_squares += part;
  return {};
}

status rank_model::tp_sum(float* data, int64_t count, step_timers& time) {
  if (!comms_.tp)
    return {};
  scoped_timer t(time.allreduce_s);
  return collectives_.all_reduce_sum(*comms_.tp, data,
                                     static_cast<size_t>(count));
}

status rank_model::apply_optimizer(int64_t step, double lr, double grad_scale) {
  const auto& t = cfg_.train;
  const int64_t lo = opt_first_, hi = opt_first_ + opt_count_;
  for (const auto& spec : layout_.tensors()) {
    // This rank's part of the tensor (all of it unless sharded).
    const int64_t first = std::max(lo, spec.offset);
    const int64_t last = std::min(hi, spec.offset + spec.numel);
    if (first >= last)
      continue;
    // Decay matrices only, as is usual for norms' gains.
    const double wd = spec.shape.size() > 1 ? t.weight_decay : 0.0;
    moments_.step(stream_, params_.data() + first, grads_.data() + first,
                  first - lo, last - first,
                  {lr, t.beta1, t.beta2, t.eps, wd, step, grad_scale});
  }
  if (sharded_)
    TUTTI_RETURN_IF_ERROR(
      collectives_.all_gather(*comms_.dp, params_.data(), params_.size()));
  k::fill_zero(stream_, grads_.data(), static_cast<int64_t>(grads_.size()));
  if (cfg_.moe.bias_update_rate > 0) {
    const int64_t e = cfg_.moe.num_experts;
    for (int64_t l = cfg_.moe.first_k_dense_replace;
         l < cfg_.model.num_hidden_layers; ++l)
      k::bias_update(stream_, router_bias_.data() + l * e,
                     counts_step_dev_[l].data(), e, cfg_.moe.bias_update_rate);
  }
  return {};
}

status rank_model::full_moments(std::vector<float>& m, std::vector<float>& v) {
  const auto total = static_cast<size_t>(layout_.total());
  const bool first = comms_.dp->rank() == 0;
  if (!sharded_) {
    if (first) {
      m.resize(total);
      v.resize(total);
      moments_.download(stream_, m.data(), v.data(),
                        static_cast<int64_t>(total), 0);
    }
    return {};
  }
  // Gathered on rank 0 only (the one that writes dense tensors): the
  // other ranks hold no full-size copy, even for a moment. The slices go
  // as floats, whatever the moments' dtype.
  std::vector<float> slice_m(static_cast<size_t>(opt_count_)),
    slice_v(slice_m.size());
  moments_.download(stream_, slice_m.data(), slice_v.data(), opt_count_, 0);
  tensor<float> mine, full;
  full.resize(stream_, first ? total : 1);
  for (auto [source, out] : {std::pair{&slice_m, &m}, std::pair{&slice_v, &v}}) {
    mine.upload(stream_, *source);
    TUTTI_RETURN_IF_ERROR(collectives_.gather_to_first(
      *comms_.dp, mine.data(), total, full.data()));
    if (first)
      *out = full.to_host(stream_);
  }
  return {};
}

void rank_model::load_moments(const std::vector<float>& m,
                              const std::vector<float>& v) {
  moments_.upload(stream_, m.data() + opt_first_, v.data() + opt_first_,
                  opt_count_, 0);
}

} // namespace tutti::train
