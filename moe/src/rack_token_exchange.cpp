// The rack-aware strategy: rack_exchange.hpp's relays behind the
// token_exchange interface. The counts ride in the dispatch's own count
// all-reduce (no exchange of their own), the rows land by sender and are
// regrouped by expert, as the flat exchange's. Given the router's gates
// (training), the dispatch is the routed one: its relay plan, kept in the
// exchange_plan, lets the way back sum a token's outputs at its relays and
// the gradients' dispatch send the output gradient once per rack; without
// them (serving, whose engine sums a token's outputs with its own kernel)
// rows come back one by one, as sent.

#include "exchanges.hpp"

namespace tutti::moe {

namespace k = tutti::kernels;

void rack_token_exchange::count_rack() { count_bytes(rack_.bytes_to()); }

status rack_token_exchange::dispatch_rows(const routed_rows& rows,
                                          exchange_plan& plan,
                                          k::tensor<float>& /*dispatch_order*/,
                                          const landing& land,
                                          exchange_clock& clock) {
  const int64_t P = group_.size(), me = group_.rank();
  TUTTI_RETURN_IF_ERROR(plan_dispatch(rows, P, me, plan));
  const auto& first = plan.expert_first;
  const int64_t d = plan.d, K = plan.k, E = first[P];
  const int64_t L = first[me + 1] - first[me];
  // The relays need each row's token (to send a token once per rack) and,
  // routed, its slot (to sum its outputs in slot order) and the gates.
  slot_host_.resize(plan.rows);
  if (plan.rows > 0)
    k::download(stream_, slot_host_.data(), rows.slot_of_row,
                plan.rows * sizeof(int32_t));
  const float* gate = rows.gates;
  if (gate && stream_.device != k::device_kind::cpu) {
    gate_host_.resize(plan.tokens * K);
    k::download(stream_, gate_host_.data(), rows.gates,
                gate_host_.size() * sizeof(float));
    gate = gate_host_.data();
  }
  // Every member's per-expert counts ride in the dispatch's count
  // all-reduce: this member's experts' rows from each, [s * E + e].
  std::vector<int64_t> counts = plan.send_expert;
  float* landing_at = nullptr;
  auto recv_into = [&](const std::vector<int64_t>& got) -> expected<float*> {
    for (int64_t s = 0; s < P; ++s)
      for (int64_t j = 0; j < L; ++j)
        plan.recv_expert[s * L + j] = counts[s * E + first[me] + j];
    plan_receive(plan, me, chunks_);
    if (got != plan.recv)
      return status::error("rack all-to-all: the members' expert counts "
                           "disagree with the rows they send");
    plan.regroup.upload(stream_, regroup_index(plan));
    auto landed = land(plan);
    if (!landed.ok())
      return landed.error();
    landing_at = landed.value();
    received_.resize(stream_, std::max<int64_t>(plan.recv_rows, 1) * d);
    return received_.data();
  };
  rack_.reset_bytes();
  {
    clocked t(clock, stream_);
    if (gate) {
      const std::vector<int64_t> row_slot(slot_host_.begin(), slot_host_.end());
      TUTTI_RETURN_IF_ERROR(rack_.dispatch(
        group_, collectives_, rows.tokens, plan.tokens, d, K, row_slot, gate,
        plan.send, counts, recv_into, plan.relays));
    } else {
      std::vector<int64_t> row_token(plan.rows);
      for (int64_t r = 0; r < plan.rows; ++r)
        row_token[r] = slot_host_[r] / K;
      TUTTI_RETURN_IF_ERROR(rack_.dispatch(group_, collectives_, rows.tokens, d,
                                           row_token, plan.send, counts,
                                           recv_into));
    }
  }
  count_rack();
  k::gather_rows(stream_, received_.data(), plan.regroup.data(), landing_at,
                 plan.recv_rows, d);
  if (gate)
    plan_combine_gates(plan, gate);
  return {};
}

// Through the relays a group's outputs come summed on its lead row
// (rack_plan.hpp): gate 1 there, 0 on the group's other (zero) rows.
void rack_token_exchange::plan_combine_gates(exchange_plan& plan,
                                             const float* gates) {
  gate_mix_.assign(gates, gates + plan.tokens * plan.k);
  combine_gates(plan.relays, gate_mix_);
  plan.relay_gates.upload(stream_, gate_mix_);
  plan.summed = true;
}

status rack_token_exchange::combine(exchange_plan& plan, size_t chunk,
                                    combine_kind kind,
                                    const float* experts_order,
                                    float* dispatch_order, float* gate_grads,
                                    exchange_clock& clock) {
  TUTTI_RETURN_IF_ERROR(plan.check_chunk(chunk));
  // One chunk: the relays batch a rack's rows for a member into one
  // message, and their sums land in dispatch order.
  const auto& ch = plan.chunks[chunk];
  const float* send = pack_chunk(stream_, plan, ch, experts_order, chunk_index_,
                                 chunk_send_);
  float* dgate = kind == combine_kind::input_gradients ? gate_grads : nullptr;
  rack_.reset_bytes();
  {
    clocked t(clock, stream_);
    TUTTI_RETURN_IF_ERROR(
      plan.summed
        ? rack_.combine(group_, collectives_, plan.relays, kind, send, ch.send,
                        dispatch_order, ch.recv, dgate, plan.d)
        : rack_.relayed_back(group_, collectives_, send, ch.send,
                             dispatch_order, ch.recv, plan.d));
  }
  count_rack();
  return {};
}

status rack_token_exchange::dispatch_gradient(exchange_plan& plan,
                                              const float* dout,
                                              const float* dispatch_order,
                                              float* experts_order,
                                              exchange_clock& clock) {
  const int64_t d = plan.d;
  received_.resize(stream_, std::max<int64_t>(plan.recv_rows, 1) * d);
  rack_.reset_bytes();
  {
    clocked t(clock, stream_);
    TUTTI_RETURN_IF_ERROR(
      plan.summed ? rack_.dispatch_gradient(group_, collectives_, plan.relays,
                                            dout, dispatch_order,
                                            received_.data(), plan.recv, d)
                  : rack_.relayed(
                    group_, collectives_, relay_direction::out_of_origin,
                    dispatch_order, plan.send, received_.data(), plan.recv, d));
  }
  count_rack();
  k::gather_rows(stream_, received_.data(), plan.regroup.data(), experts_order,
                 plan.recv_rows, d);
  return {};
}

void rack_token_exchange::reserve(int64_t rows, int64_t d) {
  received_.reserve(stream_, rows * d);
}

} // namespace tutti::moe
