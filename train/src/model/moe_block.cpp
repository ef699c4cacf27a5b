// The MoE half of a decoder layer: route, dispatch over the EP group,
// experts (through the expert_executor) and combine, chunk by chunk, the
// rows moved by the exchange the config chose (moe/token_exchange.hpp);
// with shared experts their output added (mlp_block.cpp), in a leading
// dense layer its MLP instead.
// Expert-parallel layout: EP member p holds slots
// [p*L, (p+1)*L), L = experts / ep_size; slot s holds expert s, or under a
// placement the expert whose slot_of_expert_ is s. Routing, capacity and
// the router's statistics stay in expert ids; from the dispatch plan on,
// rows are grouped by slot.
//
// Tensor parallelism: every TP rank routes the same tokens the same way
// (replicated router), exchanges them within its own EP group (the ranks
// of its TP index) and runs its slice of each expert's intermediate
// dimension; the combined partial outputs, and backward the gate and
// input gradients, are summed over the TP group.

#include <algorithm>
#include <numeric>
#include <optional>

#include "tutti/model/tensor_names.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/rank_model.hpp"

namespace tutti::train {

namespace k = tutti::kernels;
namespace names = model::names;

namespace {

// The exchanges' communication into the step's all-to-all timers.
class step_clock final : public moe::exchange_clock {
public:
  step_clock(step_timers& time, const comm::communicator& group)
    : time_(time), group_(group) {}
  void start() override { timer_.emplace(time_, group_); }
  void stop() override { timer_.reset(); }

private:
  step_timers& time_;
  const comm::communicator& group_;
  std::optional<exchange_timer<comm::communicator>> timer_;
};

} // namespace

// The global pre-drop counts: the f_i of the Switch loss and the load that
// bias balancing reacts to, over the whole global batch (so the loss does
// not depend on how the batch is split over ranks).
status rank_model::route_counts(layer_acts& a, int64_t n, step_stats& stats,
                                int64_t l, step_timers& time) {
  const auto& e = cfg_.moe;
  const int64_t E = e.num_experts, K = e.router_top_k;
  const int32_t* topk = a.topk_orig.host_view(stream_, topk_host_);
  std::fill(a.counts_global.begin(), a.counts_global.end(), 0);
  for (int64_t i = 0; i < n * K; ++i) {
    if (topk[i] < 0 || topk[i] >= E) // NaN logits route nowhere
      return status::error("layer " + std::to_string(l)
                           + ": router chose expert " + std::to_string(topk[i])
                           + " of " + std::to_string(E)
                           + " (non-finite router logits?)");
    a.counts_global[topk[i]] += 1;
  }
  if (stats.routing_ids)
    stats.routing_ids->insert(stats.routing_ids->end(), topk, topk + n * K);
  {
    scoped_timer t(time.allreduce_s);
    TUTTI_RETURN_IF_ERROR(comms_.dp->all_reduce_sum(a.counts_global.data(), E));
  }
  std::vector<float> fraction(E);
  for (int64_t i = 0; i < E; ++i) {
    fraction[i] = static_cast<float>(
      static_cast<double>(a.counts_global[i])
      / (static_cast<double>(global_tokens_) * K));
    // Summed over the step's micro-batches: the bias update and the
    // reported counts see the whole global batch.
    stats.expert_counts[l * E + i] += a.counts_global[i];
    counts_step_[l][i] += a.counts_global[i];
  }
  a.fraction.upload(stream_, fraction);
  counts_step_dev_[l].upload(stream_, counts_step_[l]);
  const auto term = static_cast<size_t>(micro_ * cfg_.model.num_hidden_layers
                                        + l);
  // Pipeline: each term also by (micro-batch, layer), for the step's sum
  // in the one-stage order.
  if (e.aux_loss_coeff > 0) {
    const double aux = k::switch_loss_forward(stream_, a.rprobs.data(),
                                              a.fraction.data(), n, E,
                                              aux_coeff(), global_tokens_);
    stats.aux_loss += aux;
    if (term < aux_terms_.size())
      aux_terms_[term] = aux;
  }
  if (e.z_loss_coeff > 0) {
    const double z = k::z_loss_forward(stream_, a.logits.data(), n, E,
                                       z_coeff(), global_tokens_);
    stats.z_loss += z;
    if (term < z_terms_.size())
      z_terms_[term] = z;
  }
  return {};
}

status rank_model::moe_forward(int64_t l, int64_t n, step_stats* stats,
                               step_timers& time) {
  if (cfg_.moe.dense_layer(l))
    return dense_layer_forward(l, n, time);
  const auto& m = cfg_.model;
  const auto& e = cfg_.moe;
  auto& a = acts_[l];
  const int64_t d = m.hidden_size, E = e.num_experts, K = e.router_top_k;
  const int64_t P = comms_.ep->size(), L = E / P;
  float* out = l + 1 < m.num_hidden_layers ? acts_[l + 1].x_in.data()
                                           : x_final_.data();
  const float temperature = static_cast<float>(e.router_temperature);

  k::rmsnorm_forward(stream_, a.x_mid.data(),
                     param(layer_name(l, names::post_norm)), a.xn2.data(),
                     a.rstd2.data(), n, d, static_cast<float>(m.rms_norm_eps));
  k::linear_forward(stream_, a.xn2.data(), param(layer_name(l, names::router)),
                    a.logits.data(), n, d, E);
  if (e.scoring == scoring_func::sigmoid) {
    k::router_sigmoid_forward(stream_, a.logits.data(),
                              router_bias_.data() + l * E, a.topk_orig.data(),
                              a.gate.data(), n, E, K, e.n_group, e.topk_group,
                              e.norm_topk_prob, e.routed_scaling_factor);
  } else {
    k::router_topk_forward(
      stream_, a.logits.data(), router_bias_.data() + l * E, a.topk_orig.data(),
      a.gate.data(), a.rprobs.data(), n, E, K, temperature);
    if (!e.norm_topk_prob)
      k::router_gates_from_probs(stream_, a.topk_orig.data(), a.rprobs.data(),
                                 a.gate.data(), n, E, K);
  }
  if (stats)
    TUTTI_RETURN_IF_ERROR(route_counts(a, n, *stats, l, time));

  // Capacity is per rank and expert, over this rank's tokens.
  a.topk_kept.assign(stream_, a.topk_orig);
  const int64_t capacity = k::expert_capacity(e.capacity_factor, n, K, E);
  const int64_t dropped = k::apply_capacity(stream_, a.topk_kept.data(),
                                            a.gate.data(), a.kept.data(), n, E,
                                            K, capacity);
  if (stats)
    stats->dropped_tokens += dropped;
  if (slot_of_expert_.size() > 0)
    k::remap_experts(stream_, a.topk_kept.data(), n * K,
                     slot_of_expert_.data() + l * E);
  a.rows = k::permute_plan(stream_, a.topk_kept.data(), n, E, K,
                           a.slot_of_row.data(), a.kept.data());

  // The rows to their experts' members, the per-expert counts shared on
  // the way; they land in the experts' order in dexp_in_.
  moe::routed_rows rows;
  rows.tokens = a.xn2.data();
  rows.tokens_count = n;
  rows.d = d;
  rows.k = K;
  rows.slot_of_row = a.slot_of_row.data();
  rows.rows = a.rows;
  rows.expert_rows.resize(E);
  a.kept.download(stream_, rows.expert_rows.data(), E);
  rows.expert_first.resize(P + 1);
  for (int64_t p = 0; p <= P; ++p)
    rows.expert_first[p] = p * L;
  rows.gates = a.gate.data();
  step_clock clock(time, *comms_.ep);
  TUTTI_RETURN_IF_ERROR(exchange_->dispatch(
    rows, a.exchange, drows_,
    [&](const moe::exchange_plan& plan) -> expected<float*> {
      for (auto* buf : {&dexp_in_, &dexp_out_})
        buf->resize(stream_, std::max<int64_t>(plan.recv_rows, 1) * d);
      return dexp_in_.data();
    },
    clock));
  const int64_t recv_rows = a.exchange.recv_rows;
  a.y_rows.resize(stream_, std::max<int64_t>(a.rows, 1) * d);
  // A later forward may come before this backward, unless the shard keeps
  // each slot's.
  if (slots_.size() > 1 && !keeps_expert_activations())
    a.expert_in.assign(
      stream_, dexp_in_.data(),
      static_cast<size_t>(std::max<int64_t>(recv_rows, 1) * d));
  expert_forward_of_[l] = micro_;
  k::wait(stream_); // the shard reads them on its own stream
  // Experts and combine, chunk by chunk. In a group of one the experts
  // write their outputs in dispatch order themselves.
  float* expert_out = exchange_->experts_order_is_dispatch_order()
                        ? a.y_rows.data()
                        : dexp_out_.data();
  TUTTI_RETURN_IF_ERROR(experts_.forward_chunks(
    l, dexp_in_.data(), expert_out, d, a.exchange.chunk_rows(),
    [&](size_t c) {
      return exchange_->combine(a.exchange, c, moe::combine_kind::outputs,
                                expert_out, a.y_rows.data(), nullptr, clock);
    },
    time.overlap_s));
  // An exchange that summed a token's outputs on the way weighs its rows
  // with gates of its own.
  const float* gate = a.exchange.combine_gates(a.gate.data());
  k::unpermute_combine(stream_, a.y_rows.data(), a.slot_of_row.data(), gate,
                       out, a.rows, n, K, d);
  if (mlp_width(l) > 0) {
    // The shared experts' partial output joins the routed experts' before
    // the one sum over the TP group.
    mlp_out_.resize(stream_, n * d);
    mlp_forward(l, n, mlp_out_.data());
    k::axpy(stream_, 1.0f, mlp_out_.data(), out, n * d);
  }
  TUTTI_RETURN_IF_ERROR(tp_sum(out, n * d, time));
  k::axpy(stream_, 1.0f, a.x_mid.data(), out, n * d);
  return {};
}

// 1F1B runs micro-batch i+1's forward before micro-batch i's backward on
// all but the last stage; the expert shard keeps only the last forward of
// each layer for backward, so it runs micro-batch i's rows again (the same
// kernels on the same rows: the same saved values, bit for bit).
status rank_model::restore_expert_forward(int64_t l, layer_acts& a,
                                          step_timers& time) {
  if (expert_forward_of_[l] == micro_ || keeps_expert_activations())
    return {};
  TUTTI_RETURN_IF_ERROR(experts_.forward_chunks(
    l, a.expert_in.data(), dexp_out_.data(), cfg_.model.hidden_size,
    a.exchange.chunk_rows(), [](size_t) { return status{}; }, time.compute_s));
  expert_forward_of_[l] = micro_;
  return {};
}

// dx: gradient of the layer's output in, gradient of x_mid out.
status rank_model::moe_backward(int64_t l, int64_t n, tensor<float>& dx,
                                step_timers& time) {
  if (cfg_.moe.dense_layer(l))
    return dense_layer_backward(l, n, dx, time);
  const auto& m = cfg_.model;
  const auto& e = cfg_.moe;
  auto& a = acts_[l];
  const int64_t d = m.hidden_size, E = e.num_experts, K = e.router_top_k;
  const float temperature = static_cast<float>(e.router_temperature);
  const int64_t recv_rows = a.exchange.recv_rows;
  dgate_.resize(stream_, n * K);
  drows_.resize(stream_, std::max<int64_t>(a.rows, 1) * d);
  dexp_in_.resize(stream_, std::max<int64_t>(recv_rows, 1) * d);
  dexp_out_.resize(stream_, std::max<int64_t>(recv_rows, 1) * d);
  TUTTI_RETURN_IF_ERROR(restore_expert_forward(l, a, time));

  // y_rows holds what the combine left (through the rack relays a group's
  // sum on its lead): the rows' gradients are right, and the gate
  // gradients but for the rows an exchange summed, whose come back with
  // the input gradients. In a group of one the rows' gradients are in the
  // experts' order as they are made, and the experts' input gradients go
  // straight to drows_.
  const bool in_place = exchange_->experts_order_is_dispatch_order();
  float* drows = in_place ? dexp_out_.data() : drows_.data();
  float* dexperts_in = in_place ? drows_.data() : dexp_in_.data();
  k::unpermute_combine_backward(stream_, dx.data(), a.y_rows.data(),
                                a.slot_of_row.data(), a.gate.data(), drows,
                                dgate_.data(), a.rows, n, K, d);
  step_clock clock(time, *comms_.ep);
  TUTTI_RETURN_IF_ERROR(exchange_->dispatch_gradient(
    a.exchange, dx.data(), drows, dexp_out_.data(), clock));
  k::wait(stream_); // the shard reads them on its own stream
  // The experts' input gradients go back chunk by chunk, into drows_ (its
  // gradients are sent already), as in the forward pass.
  TUTTI_RETURN_IF_ERROR(experts_.backward_chunks(
    l, dexp_out_.data(), dexperts_in, d, a.exchange.chunk_rows(),
    [&](size_t c) {
      return exchange_->combine(a.exchange, c,
                                moe::combine_kind::input_gradients, dexperts_in,
                                drows_.data(), dgate_.data(), clock);
    },
    time.overlap_s));
  // y_rows are this TP rank's partial outputs: so are the gates' gradients.
  TUTTI_RETURN_IF_ERROR(tp_sum(dgate_.data(), n * K, time));

  dtmp_.zeros(stream_, n * d);
  dtmp2_.resize(stream_, n * d);
  k::permute_rows_backward(stream_, drows_.data(), a.slot_of_row.data(),
                           dtmp_.data(), a.rows, K, d);
  if (mlp_width(l) > 0)
    mlp_backward(l, n, dx.data(), dtmp_.data());
  TUTTI_RETURN_IF_ERROR(tp_sum(dtmp_.data(), n * d, time));
  dlogits_.resize(stream_, n * E);
  if (e.scoring == scoring_func::sigmoid)
    k::router_sigmoid_backward(stream_, a.topk_orig.data(), a.logits.data(),
                               dgate_.data(), dlogits_.data(), n, E, K,
                               e.norm_topk_prob, e.routed_scaling_factor);
  else if (e.norm_topk_prob)
    k::router_topk_backward(stream_, a.topk_orig.data(), a.gate.data(),
                            dgate_.data(), dlogits_.data(), n, E, K,
                            temperature);
  else
    k::router_gates_from_probs_backward(stream_, a.topk_orig.data(),
                                        a.rprobs.data(), dgate_.data(),
                                        dlogits_.data(), n, E, K, temperature);
  if (e.aux_loss_coeff > 0)
    k::switch_loss_backward(stream_, a.rprobs.data(), a.fraction.data(),
                            dlogits_.data(), n, E, aux_coeff(), global_tokens_,
                            temperature);
  if (e.z_loss_coeff > 0)
    k::z_loss_backward(stream_, a.logits.data(), dlogits_.data(), n, E,
                       z_coeff(), global_tokens_);
  k::linear_backward(stream_, a.xn2.data(), param(layer_name(l, names::router)),
                     dlogits_.data(), dtmp2_.data(),
                     grad(layer_name(l, names::router)), n, d, E);
  k::axpy(stream_, 1.0f, dtmp2_.data(), dtmp_.data(), n * d);
  k::rmsnorm_backward(stream_, a.x_mid.data(),
                      param(layer_name(l, names::post_norm)), a.rstd2.data(),
                      dtmp_.data(), dtmp2_.data(),
                      grad(layer_name(l, names::post_norm)), n, d);
  k::axpy(stream_, 1.0f, dtmp2_.data(), dx.data(), n * d);
  return {};
}

} // namespace tutti::train
