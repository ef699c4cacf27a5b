// The MoE half of a decoder layer: route, dispatch over the EP group,
// experts (through the expert_executor) and combine, chunk by chunk
// (moe_combine.cpp). Expert-parallel layout: EP member p holds slots
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

#include "tutti/model/tensor_names.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/rank_model.hpp"

namespace tutti::train {

namespace k = tutti::kernels;
namespace names = model::names;

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
  k::router_topk_forward(stream_, a.logits.data(), router_bias_.data() + l * E,
                         a.topk_orig.data(), a.gate.data(), a.rprobs.data(), n,
                         E, K, temperature);
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
  a.kept_host.resize(E);
  a.kept.download(stream_, a.kept_host.data(), E);

  // Exchange the per-expert counts (host memory), then the rows. Through
  // the rack relays the counts ride in the dispatch's own count exchange.
  a.send_counts.assign(P, 0);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < L; ++j)
      a.send_counts[p] += a.kept_host[p * L + j];
  a.recv_expert_counts.assign(P * L, 0);
  const bool alone = exchanges_with_self_only();
  const bool by_runs = exchanges_by_runs();
  if (rack_) {
    TUTTI_RETURN_IF_ERROR(dispatch_rows(a, n, time)); // moe_exchange.cpp
  } else {
    {
      exchange_timer t(time, *comms_.ep);
      TUTTI_RETURN_IF_ERROR(comms_.ep->all_to_all(
        a.kept_host.data(), a.recv_expert_counts.data(), L));
    }
    plan_receive(a);
    if (by_runs)
      plan_runs(a);
    if (alone) { // the dispatch order is the experts' order already
      k::permute_rows(stream_, a.xn2.data(), a.slot_of_row.data(),
                      dexp_in_.data(), a.rows, K, d);
      count_sent_rows(a.send_counts);
    } else {
      TUTTI_RETURN_IF_ERROR(dispatch_rows(a, n, time));
    }
  }

  if (!alone && !by_runs)
    k::gather_rows(stream_, drecv_.data(), a.src_index.data(), dexp_in_.data(),
                   a.recv_rows, d);
  a.y_rows.resize(stream_, std::max<int64_t>(a.rows, 1) * d);
  if (slots_.size() > 1) // a later forward may come before this backward
    a.expert_in.assign(
      stream_, dexp_in_.data(),
      static_cast<size_t>(std::max<int64_t>(a.recv_rows, 1) * d));
  expert_forward_of_[l] = micro_;
  k::wait(stream_); // the shard reads them on its own stream
  // Experts and combine, chunk by chunk (moe_combine.cpp).
  // Alone, the experts write their outputs in dispatch order themselves.
  plan_combine(a);
  TUTTI_RETURN_IF_ERROR(experts_.forward_chunks(
    l, dexp_in_.data(), alone ? a.y_rows.data() : dexp_out_.data(), d,
    combine_chunk_rows(),
    [&](size_t c) {
      if (!alone)
        return combine_chunk(a, c, dexp_out_, a.y_rows,
                             moe::combine_kind::outputs, time);
      count_sent_rows(combine_[c].send); // as the plan counts self-exchanges
      return status{};
    },
    time.overlap_s));
  // Through the rack relays a group's outputs come summed on its lead row
  // (rack_plan.hpp): gate 1 there, 0 on the group's other (zero) rows.
  const float* gate = a.gate.data();
  if (rack_) {
    rack_combine_gates(a, n);
    gate = gate_combine_.data();
  }
  k::unpermute_combine(stream_, a.y_rows.data(), a.slot_of_row.data(), gate,
                       out, a.rows, n, K, d);
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
  if (expert_forward_of_[l] == micro_)
    return {};
  plan_combine(a);
  TUTTI_RETURN_IF_ERROR(experts_.forward_chunks(
    l, a.expert_in.data(), dexp_out_.data(), cfg_.model.hidden_size,
    combine_chunk_rows(), [](size_t) { return status{}; }, time.compute_s));
  expert_forward_of_[l] = micro_;
  return {};
}

// dx: gradient of the layer's output in, gradient of x_mid out.
status rank_model::moe_backward(int64_t l, int64_t n, tensor<float>& dx,
                                step_timers& time) {
  const auto& m = cfg_.model;
  const auto& e = cfg_.moe;
  auto& a = acts_[l];
  const int64_t d = m.hidden_size, E = e.num_experts, K = e.router_top_k;
  const float temperature = static_cast<float>(e.router_temperature);
  dgate_.resize(stream_, n * K);
  drows_.resize(stream_, std::max<int64_t>(a.rows, 1) * d);
  drecv_.resize(stream_, std::max<int64_t>(a.recv_rows, 1) * d);
  dexp_in_.resize(stream_, std::max<int64_t>(a.recv_rows, 1) * d);
  dexp_out_.resize(stream_, std::max<int64_t>(a.recv_rows, 1) * d);
  TUTTI_RETURN_IF_ERROR(restore_expert_forward(l, a, time));

  // Through the rack relays y_rows holds what the combine left (a group's
  // sum on its lead): the rows' gradients are right, the gate gradients of
  // the groups' rows come from the relays with the input gradients.
  // Alone, the rows' gradients are in the experts' order as they are made,
  // and the experts' input gradients go straight to drows_.
  const bool alone = exchanges_with_self_only();
  k::unpermute_combine_backward(
    stream_, dx.data(), a.y_rows.data(), a.slot_of_row.data(), a.gate.data(),
    alone ? dexp_out_.data() : drows_.data(), dgate_.data(), a.rows, n, K, d);
  const bool by_runs = exchanges_by_runs();
  if (alone) {
    TUTTI_RETURN_IF_ERROR(tp_sum(dgate_.data(), n * K, time));
    count_sent_rows(a.send_counts);
  } else if (by_runs) {
    TUTTI_RETURN_IF_ERROR(tp_sum(dgate_.data(), n * K, time));
    TUTTI_RETURN_IF_ERROR(exchange_by_runs(drows_.data(), a.dispatch_runs,
                                           dexp_out_.data(), a.expert_runs,
                                           a.send_counts, time));
  } else if (rack_) {
    TUTTI_RETURN_IF_ERROR(rack_dispatch_gradient(a, dx.data(), time));
  } else {
    // y_rows are this TP rank's partial outputs: so are the gates' gradients.
    TUTTI_RETURN_IF_ERROR(tp_sum(dgate_.data(), n * K, time));
    TUTTI_RETURN_IF_ERROR(exchange_rows(moe::relay_direction::out_of_origin,
                                        drows_.data(), a.send_counts,
                                        drecv_.data(), a.recv_counts, time));
  }
  if (!alone && !by_runs)
    k::gather_rows(stream_, drecv_.data(), a.src_index.data(), dexp_out_.data(),
                   a.recv_rows, d);
  k::wait(stream_); // the shard reads them on its own stream
  // The experts' input gradients go back chunk by chunk, into drows_ (its
  // gradients are sent already), as in the forward pass.
  plan_combine(a);
  TUTTI_RETURN_IF_ERROR(experts_.backward_chunks(
    l, dexp_out_.data(), alone ? drows_.data() : dexp_in_.data(), d,
    combine_chunk_rows(),
    [&](size_t c) {
      if (!alone)
        return combine_chunk(a, c, dexp_in_, drows_,
                             moe::combine_kind::input_gradients, time);
      count_sent_rows(combine_[c].send);
      return status{};
    },
    time.overlap_s));
  if (rack_) // the relays' gate gradients are TP partials as well
    TUTTI_RETURN_IF_ERROR(tp_sum(dgate_.data(), n * K, time));

  dtmp_.zeros(stream_, n * d);
  dtmp2_.resize(stream_, n * d);
  k::permute_rows_backward(stream_, drows_.data(), a.slot_of_row.data(),
                           dtmp_.data(), a.rows, K, d);
  TUTTI_RETURN_IF_ERROR(tp_sum(dtmp_.data(), n * d, time));
  dlogits_.resize(stream_, n * E);
  k::router_topk_backward(stream_, a.topk_orig.data(), a.gate.data(),
                          dgate_.data(), dlogits_.data(), n, E, K, temperature);
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
