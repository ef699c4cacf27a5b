// rank_model: construction, the forward/backward driver, the LM head and
// loss, the optimizer. The attention and MoE blocks live in their own files.

#include "tutti/model/rank_model.hpp"

#include <chrono>
#include <cmath>

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
                       expert_executor& experts, kernels::stream where)
  : cfg_(cfg), comms_(comms), experts_(experts), stream_(where),
    collectives_(where), layout_(dense_layout(cfg.model, cfg.moe)) {
  {
    std::vector<float> init(layout_.total());
    init_params(layout_, init.data(), cfg.train.seed, cfg.model.init_std);
    params_.upload(stream_, init);
  }
  grads_.zeros(stream_, layout_.total());
  m_.zeros(stream_, layout_.total());
  v_.zeros(stream_, layout_.total());
  router_bias_.zeros(stream_,
                     cfg.model.num_hidden_layers * cfg.moe.num_experts);
  acts_.resize(cfg.model.num_hidden_layers);
  if (cfg.moe.rack_aware_alltoall) {
    auto racks = rack_layout::of_group(cfg, comms_.world->rank());
    if (racks.racks() > 1) // in one rack it is the flat exchange
      rack_ = std::make_unique<rack_exchange>(std::move(racks), where);
  }

  const auto& m = cfg.model;
  const int64_t seqs = cfg.train.global_batch_size / cfg.cluster.world_size;
  const int64_t s = cfg.train.seq_len, n = seqs * s, d = m.hidden_size;
  const int64_t hd = m.head_dim(), e = cfg.moe.num_experts;
  const int64_t kk = cfg.moe.router_top_k;
  const auto& st = stream_;
  for (auto& a : acts_) {
    for (auto* buf : {&a.x_in, &a.xn1, &a.x_mid, &a.xn2})
      buf->resize(st, n * d);
    a.rstd1.resize(st, n);
    a.rstd2.resize(st, n);
    a.q.resize(st, n * m.num_attention_heads * hd);
    a.attn.resize(st, n * m.num_attention_heads * hd);
    a.k.resize(st, n * m.num_key_value_heads * hd);
    a.v.resize(st, n * m.num_key_value_heads * hd);
    a.probs.resize(st, seqs * m.num_attention_heads * s * s);
    a.logits.resize(st, n * e);
    a.rprobs.resize(st, n * e);
    a.gate.resize(st, n * kk);
    a.topk_orig.resize(st, n * kk);
    a.topk_kept.resize(st, n * kk);
    a.slot_of_row.resize(st, n * kk);
    a.kept.resize(st, e);
    a.counts_global.assign(e, 0);
    a.counts_global_dev.zeros(st, e);
    a.fraction.resize(st, e);
  }
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
    TUTTI_RETURN_IF_ERROR(attention_forward(l, seqs));
    TUTTI_RETURN_IF_ERROR(moe_forward(l, n, stats, time));
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
                            1.0f / static_cast<float>(global_tokens_));
  k::linear_backward(stream_, xnf_.data(), param("lm_head.weight"),
                     dlogits_.data(), dtmp_.data(), grad("lm_head.weight"), n,
                     d, m.vocab_size);
  k::rmsnorm_backward(stream_, x_final_.data(), param("model.norm.weight"),
                      rstdf_.data(), dtmp_.data(), dx_.data(),
                      grad("model.norm.weight"), n, d);
  for (int64_t l = m.num_hidden_layers - 1; l >= 0; --l) {
    TUTTI_RETURN_IF_ERROR(moe_backward(l, n, dx_, time));
    attention_backward(l, seqs, dx_);
  }
  k::embedding_backward(stream_, inputs_.data(), dx_.data(),
                        grad("model.embed_tokens.weight"), n, d);
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
  double ce_sum = 0;
  TUTTI_RETURN_IF_ERROR(
    forward(inputs, targets, seqs, ce_sum, &stats, stats.time));
  TUTTI_RETURN_IF_ERROR(backward(seqs, stats.time));
  // One all-reduce for the scalars every rank reports identically.
  double sums[5] = {ce_sum, stats.aux_loss, stats.z_loss,
                    static_cast<double>(stats.dropped_tokens),
                    stats.stop_votes};
  {
    scoped_timer t(stats.time.allreduce_s);
    TUTTI_RETURN_IF_ERROR(comms_.world->all_reduce_sum(sums, 5));
  }
  stats.stop_votes = sums[4];
  stats.tokens = global_tokens_;
  stats.alltoall_bytes = alltoall_bytes_;
  stats.alltoall_bytes_to = alltoall_bytes_to_;
  stats.loss = sums[0] / static_cast<double>(global_tokens_);
  stats.aux_loss = sums[1];
  stats.z_loss = sums[2];
  stats.dropped_tokens = static_cast<int64_t>(sums[3]);
  return {};
}

status rank_model::evaluate(const int32_t* inputs, const int32_t* targets,
                            int64_t seqs, double& loss_sum, int64_t& tokens,
                            step_timers& time) {
  double ce_sum = 0;
  TUTTI_RETURN_IF_ERROR(forward(inputs, targets, seqs, ce_sum, nullptr, time));
  {
    scoped_timer t(time.allreduce_s);
    TUTTI_RETURN_IF_ERROR(comms_.world->all_reduce_sum(&ce_sum, 1));
  }
  loss_sum = ce_sum;
  tokens = global_tokens_;
  return {};
}

status rank_model::reduce_dense_grads(double& sum_squares, step_timers& time) {
  k::wait(stream_); // queued kernels count as compute
  {
    scoped_timer t(time.allreduce_s);
    TUTTI_RETURN_IF_ERROR(
      collectives_.all_reduce_sum(*comms_.world, grads_.data(), grads_.size()));
  }
  sum_squares = k::sum_squares(stream_, grads_.data(),
                               static_cast<int64_t>(grads_.size()));
  return {};
}

void rank_model::apply_optimizer(int64_t step, double lr, double grad_scale) {
  const auto& t = cfg_.train;
  for (const auto& spec : layout_.tensors()) {
    // Decay matrices only, as is usual for norms' gains.
    const double wd = spec.shape.size() > 1 ? t.weight_decay : 0.0;
    k::adamw_step(stream_, params_.data() + spec.offset,
                  grads_.data() + spec.offset, m_.data() + spec.offset,
                  v_.data() + spec.offset, spec.numel, lr, t.beta1, t.beta2,
                  t.eps, wd, step, grad_scale);
  }
  k::fill_zero(stream_, grads_.data(), static_cast<int64_t>(grads_.size()));
  if (cfg_.moe.bias_update_rate > 0) {
    const int64_t e = cfg_.moe.num_experts;
    for (int64_t l = 0; l < cfg_.model.num_hidden_layers; ++l)
      k::bias_update(stream_, router_bias_.data() + l * e,
                     acts_[l].counts_global_dev.data(), e,
                     cfg_.moe.bias_update_rate);
  }
}

} // namespace tutti::model
