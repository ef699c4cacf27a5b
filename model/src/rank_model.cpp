// rank_model: construction, the forward/backward driver, the LM head and
// loss, the optimizer. The attention and MoE blocks live in their own files.

#include "tutti/model/rank_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <utility>

#include "tutti/comm/slices.hpp"
#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/model/capacity_plan.hpp"

namespace tutti::model {

namespace k = tutti::kernels;

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
    collectives_(where), layout_(dense_layout(cfg.model, cfg.moe)) {
  if (!slot_of_expert.empty()) {
    if (static_cast<int64_t>(slot_of_expert.size())
        != cfg.model.num_hidden_layers * cfg.moe.num_experts)
      throw std::invalid_argument("rank_model: the placement must give a slot "
                                  "for every layer's experts");
    slot_of_expert_.upload(stream_, slot_of_expert);
  }
  {
    std::vector<float> init(layout_.total());
    init_params(layout_, init.data(), cfg.train.seed, cfg.model.init_std);
    params_.upload(stream_, init);
  }
  grads_.zeros(stream_, layout_.total());
  const int world = comms_.world->size();
  sharded_ = cfg.train.optimizer_sharding && world > 1;
  const auto slice = sharded_ ? comm::member_slice(layout_.total(), world,
                                                   comms_.world->rank())
                              : comm::slice{0, layout_.total()};
  opt_first_ = slice.first;
  opt_count_ = slice.count;
  m_.zeros(stream_, static_cast<size_t>(opt_count_));
  v_.zeros(stream_, static_cast<size_t>(opt_count_));
  router_bias_.zeros(stream_,
                     cfg.model.num_hidden_layers * cfg.moe.num_experts);
  acts_.resize(cfg.model.num_hidden_layers);
  if (cfg.moe.rack_aware_alltoall) {
    auto racks = rack_layout::of_group(cfg, comms_.world->rank());
    if (racks.racks() > 1) // in one rack it is the flat exchange
      rack_ = std::make_unique<rack_exchange>(std::move(racks), where);
  }

  const auto& m = cfg.model;
  micro_seqs_ = cfg.train.global_batch_size / cfg.cluster.world_size
                / cfg.train.micro_batches;
  const int64_t seqs = micro_seqs_;
  const int64_t s = cfg.train.seq_len, n = seqs * s, d = m.hidden_size;
  const int64_t hd = m.head_dim(), e = cfg.moe.num_experts;
  const int64_t kk = cfg.moe.router_top_k;
  const auto& st = stream_;
  const auto mode = cfg.train.recompute;
  // What a layer needs while it runs; `probs`: the attention core's part.
  auto size_working = [&](layer_acts& a, bool rest, bool probs) {
    if (probs)
      a.probs.resize(st, seqs * m.num_attention_heads * s * s);
    if (!rest)
      return;
    for (auto* buf : {&a.xn1, &a.x_mid, &a.xn2})
      buf->resize(st, n * d);
    a.rstd1.resize(st, n);
    a.rstd2.resize(st, n);
    a.q.resize(st, n * m.num_attention_heads * hd);
    a.attn.resize(st, n * m.num_attention_heads * hd);
    a.k.resize(st, n * m.num_key_value_heads * hd);
    a.v.resize(st, n * m.num_key_value_heads * hd);
    a.logits.resize(st, n * e);
    a.rprobs.resize(st, n * e);
    a.gate.resize(st, n * kk);
    a.topk_orig.resize(st, n * kk);
    a.topk_kept.resize(st, n * kk);
    a.slot_of_row.resize(st, n * kk);
    a.kept.resize(st, e);
  };
  for (auto& a : acts_) {
    a.x_in.resize(st, n * d);
    size_working(a, mode != recompute_mode::full, mode == recompute_mode::none);
    a.counts_global.assign(e, 0);
    a.counts_step.assign(e, 0);
    a.counts_global_dev.zeros(st, e);
    a.fraction.resize(st, e);
  }
  if (mode != recompute_mode::none)
    size_working(work_, mode == recompute_mode::full, true);
  // communication_buffer_size: auto sizes the receive side of dispatch from
  // capacity (or the dropless worst case) up front, so steps do not grow it.
  const int64_t rows = cfg.moe.communication_buffer_size > 0
                         ? cfg.moe.communication_buffer_size
                             / static_cast<int64_t>(d * sizeof(float))
                         : dispatch_buffer_rows(cfg);
  for (auto* buf : {&drecv_, &dexp_in_, &dexp_out_})
    buf->reserve(st, rows * d);
  drows_.reserve(st, n * kk * d);
  x_final_.resize(st, n * d);
  xnf_.resize(st, n * d);
  rstdf_.resize(st, n);
  logits_out_.resize(st, n * m.vocab_size);
  lse_.resize(st, n);
}

double rank_model::aux_coeff() const {
  return cfg_.moe.aux_loss_coeff / static_cast<double>(cfg_.train.micro_batches);
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
  return "model.layers." + std::to_string(l) + "." + suffix;
}

status rank_model::forward(const int32_t* inputs, const int32_t* targets,
                           int64_t seqs, double& ce_sum, step_stats* stats,
                           step_timers& time) {
  const auto& m = cfg_.model;
  const int64_t n = seqs * cfg_.train.seq_len, d = m.hidden_size;
  global_tokens_ = n * comms_.world->size();
  inputs_.upload(stream_, inputs, n);
  targets_.upload(stream_, targets, n);
  k::embedding_forward(stream_, inputs_.data(),
                       param("model.embed_tokens.weight"), acts_[0].x_in.data(),
                       n, d);
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    swap_working(acts_[l]);
    TUTTI_RETURN_IF_ERROR(attention_forward(l, seqs));
    TUTTI_RETURN_IF_ERROR(moe_forward(l, n, stats, time));
    swap_working(acts_[l]);
  }
  k::rmsnorm_forward(stream_, x_final_.data(), param("model.norm.weight"),
                     xnf_.data(), rstdf_.data(), n, d,
                     static_cast<float>(m.rms_norm_eps));
  k::linear_forward(stream_, xnf_.data(), param("lm_head.weight"),
                    logits_out_.data(), n, d, m.vocab_size);
  ce_sum = k::cross_entropy_forward(
    stream_, logits_out_.data(), targets_.data(), lse_.data(), n, m.vocab_size);
  return {};
}

status rank_model::backward(int64_t seqs, step_timers& time) {
  const auto& m = cfg_.model;
  const int64_t n = seqs * cfg_.train.seq_len, d = m.hidden_size;
  dlogits_.resize(stream_, n * m.vocab_size);
  dx_.resize(stream_, n * d);
  dtmp_.resize(stream_, n * d);
  k::cross_entropy_backward(stream_, logits_out_.data(), targets_.data(),
                            lse_.data(), dlogits_.data(), n, m.vocab_size,
                            1.0f / static_cast<float>(
                              global_tokens_ * cfg_.train.micro_batches));
  k::linear_backward(stream_, xnf_.data(), param("lm_head.weight"),
                     dlogits_.data(), dtmp_.data(), grad("lm_head.weight"), n,
                     d, m.vocab_size);
  k::rmsnorm_backward(stream_, x_final_.data(), param("model.norm.weight"),
                      rstdf_.data(), dtmp_.data(), dx_.data(),
                      grad("model.norm.weight"), n, d);
  for (int64_t l = m.num_hidden_layers - 1; l >= 0; --l) {
    swap_working(acts_[l]);
    TUTTI_RETURN_IF_ERROR(recompute(l, seqs, time));
    TUTTI_RETURN_IF_ERROR(moe_backward(l, n, dx_, time));
    attention_backward(l, seqs, dx_);
    swap_working(acts_[l]);
  }
  k::embedding_backward(stream_, inputs_.data(), dx_.data(),
                        grad("model.embed_tokens.weight"), n, d);
  return {};
}

void rank_model::swap_working(layer_acts& a) {
  const auto mode = cfg_.train.recompute;
  if (mode == recompute_mode::none)
    return;
  std::swap(a.probs, work_.probs);
  if (mode != recompute_mode::full)
    return;
  using pair = std::pair<tensor<float>*, tensor<float>*>;
  for (auto [mine, shared] : std::initializer_list<pair>{
         {&a.xn1, &work_.xn1},       {&a.rstd1, &work_.rstd1},
         {&a.q, &work_.q},           {&a.k, &work_.k},
         {&a.v, &work_.v},           {&a.attn, &work_.attn},
         {&a.x_mid, &work_.x_mid},   {&a.xn2, &work_.xn2},
         {&a.rstd2, &work_.rstd2},   {&a.logits, &work_.logits},
         {&a.rprobs, &work_.rprobs}, {&a.gate, &work_.gate},
         {&a.y_rows, &work_.y_rows}})
    std::swap(*mine, *shared);
  std::swap(a.topk_orig, work_.topk_orig);
  std::swap(a.topk_kept, work_.topk_kept);
  std::swap(a.slot_of_row, work_.slot_of_row);
  std::swap(a.kept, work_.kept);
  std::swap(a.src_index, work_.src_index);
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
    const auto& m = cfg_.model;
    auto& a = acts_[l];
    k::attention_forward(stream_, a.q.data(), a.k.data(), a.v.data(),
                         a.attn.data(), a.probs.data(), seqs,
                         cfg_.train.seq_len, m.num_attention_heads,
                         m.num_key_value_heads, m.head_dim());
    return {};
  }
  case recompute_mode::full:
    TUTTI_RETURN_IF_ERROR(attention_forward(l, seqs));
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
  alltoall_bytes_ = 0;
  alltoall_bytes_to_.assign(comms_.ep->size(), 0);
  for (auto& a : acts_)
    std::fill(a.counts_step.begin(), a.counts_step.end(), 0);
  const int64_t micro = cfg_.train.micro_batches;
  if (seqs != micro_seqs_ * micro)
    return status::error("train_step: " + std::to_string(seqs)
                         + " sequences, expected "
                         + std::to_string(micro_seqs_ * micro));
  const int64_t tokens = micro_seqs_ * cfg_.train.seq_len;
  double ce_sum = 0;
  for (int64_t i = 0; i < micro; ++i) {
    double ce = 0;
    TUTTI_RETURN_IF_ERROR(forward(inputs + i * tokens, targets + i * tokens,
                                  micro_seqs_, ce, &stats, stats.time));
    TUTTI_RETURN_IF_ERROR(backward(micro_seqs_, stats.time));
    ce_sum += ce;
  }
  const int64_t step_tokens = global_tokens_ * micro;
  // One all-reduce for the scalars every rank reports identically.
  double sums[5] = {ce_sum, stats.aux_loss, stats.z_loss,
                    static_cast<double>(stats.dropped_tokens),
                    stats.stop_votes};
  {
    scoped_timer t(stats.time.allreduce_s);
    TUTTI_RETURN_IF_ERROR(comms_.world->all_reduce_sum(sums, 5));
  }
  stats.stop_votes = sums[4];
  stats.tokens = step_tokens;
  stats.alltoall_bytes = alltoall_bytes_;
  stats.alltoall_bytes_to = alltoall_bytes_to_;
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
    TUTTI_RETURN_IF_ERROR(comms_.world->all_reduce_sum(&ce_sum, 1));
  }
  loss_sum = ce_sum;
  return {};
}

status rank_model::reduce_dense_grads(double& sum_squares, step_timers& time) {
  k::wait(stream_); // queued kernels count as compute
  auto& world = *comms_.world;
  const int members = world.size();
  const auto total = static_cast<int64_t>(grads_.size());
  if (sharded_) {
    {
      scoped_timer t(time.allreduce_s);
      TUTTI_RETURN_IF_ERROR(
        collectives_.reduce_scatter_sum(world, grads_.data(), grads_.size()));
    }
    sum_squares = k::sum_squares(stream_, grads_.data() + opt_first_,
                                 opt_count_);
    scoped_timer t(time.allreduce_s);
    return world.all_reduce_sum(&sum_squares, 1); // in member order
  }
  {
    scoped_timer t(time.allreduce_s);
    TUTTI_RETURN_IF_ERROR(
      collectives_.all_reduce_sum(world, grads_.data(), grads_.size()));
  }
  // Slice by slice in member order, as the sharded sum over ranks: the
  // clipping factor does not depend on whether the optimizer is sharded.
  sum_squares = 0;
  for (int p = 0; p < members; ++p) {
    const auto slice = comm::member_slice(total, members, p);
    const double part = k::sum_squares(stream_, grads_.data() + slice.first,
                                       slice.count);
    sum_squares = p == 0 ? part : sum_squares + part;
  }
  return {};
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
    k::adamw_step(stream_, params_.data() + first, grads_.data() + first,
                  m_.data() + (first - lo), v_.data() + (first - lo),
                  last - first, lr, t.beta1, t.beta2, t.eps, wd, step,
                  grad_scale);
  }
  if (sharded_)
    TUTTI_RETURN_IF_ERROR(
      collectives_.all_gather(*comms_.world, params_.data(), params_.size()));
  k::fill_zero(stream_, grads_.data(), static_cast<int64_t>(grads_.size()));
  if (cfg_.moe.bias_update_rate > 0) {
    const int64_t e = cfg_.moe.num_experts;
    for (int64_t l = 0; l < cfg_.model.num_hidden_layers; ++l)
      k::bias_update(stream_, router_bias_.data() + l * e,
                     acts_[l].counts_global_dev.data(), e,
                     cfg_.moe.bias_update_rate);
  }
  return {};
}

status rank_model::full_moments(std::vector<float>& m, std::vector<float>& v) {
  const auto total = static_cast<size_t>(layout_.total());
  const bool first = comms_.world->rank() == 0;
  if (!sharded_) {
    if (first) {
      m = m_.to_host(stream_);
      v = v_.to_host(stream_);
    }
    return {};
  }
  // Gathered on rank 0 only (the one that writes dense tensors): the
  // other ranks hold no full-size copy, even for a moment.
  tensor<float> full;
  full.resize(stream_, first ? total : 1);
  for (auto [source, out] : {std::pair{&m_, &m}, std::pair{&v_, &v}}) {
    TUTTI_RETURN_IF_ERROR(collectives_.gather_to_first(
      *comms_.world, source->data(), total, full.data()));
    if (first)
      *out = full.to_host(stream_);
  }
  return {};
}

void rank_model::load_moments(const std::vector<float>& m,
                              const std::vector<float>& v) {
  m_.upload(stream_, m.data() + opt_first_, static_cast<size_t>(opt_count_));
  v_.upload(stream_, v.data() + opt_first_, static_cast<size_t>(opt_count_));
}

} // namespace tutti::model
