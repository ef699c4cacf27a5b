// The flat exchange: every row straight to the member holding its expert,
// over any communicator (Gloo, NCCL, or in process on a GPU), through
// staged_collectives. The counts go first (an all_to_all_v of each
// member's counts for the experts of each other), then the rows, packed by
// member, which arrive by sender and are regrouped by expert. The way back
// goes in chunks of local experts, chunk c travelling while the experts
// compute chunk c + 1.

#include <numeric>

#include "exchanges.hpp"
#include "tutti/moe/rack_rows.hpp"

namespace tutti::moe {

namespace k = tutti::kernels;

using rack_rows::times;

status flat_exchange::exchange_rows(const float* send,
                                    const std::vector<int64_t>& send_rows,
                                    float* recv,
                                    const std::vector<int64_t>& recv_rows,
                                    int64_t d, exchange_clock& clock) {
  {
    clocked t(clock, stream_);
    TUTTI_RETURN_IF_ERROR(collectives_.all_to_all_v(
      group_, send, times(send_rows, d), recv, times(recv_rows, d)));
  }
  count_rows(send_rows, d);
  return {};
}

status flat_exchange::dispatch_rows(const routed_rows& rows,
                                    exchange_plan& plan,
                                    k::tensor<float>& dispatch_order,
                                    const landing& land,
                                    exchange_clock& clock) {
  auto landed = plan_and_land(
    rows, plan, land, [&](exchange_plan& p) { return share_counts(p, clock); });
  if (!landed.ok())
    return landed.error();
  const int64_t d = plan.d;
  plan.regroup.upload(stream_, regroup_index(plan));
  dispatch_order.resize(stream_, std::max<int64_t>(plan.rows, 1) * d);
  k::permute_rows(stream_, rows.tokens, rows.slot_of_row, dispatch_order.data(),
                  plan.rows, plan.k, d);
  received_.resize(stream_, std::max<int64_t>(plan.recv_rows, 1) * d);
  TUTTI_RETURN_IF_ERROR(exchange_rows(dispatch_order.data(), plan.send,
                                      received_.data(), plan.recv, d, clock));
  k::gather_rows(stream_, received_.data(), plan.regroup.data(), landed.value(),
                 plan.recv_rows, d);
  return {};
}

status flat_exchange::combine(exchange_plan& plan, size_t chunk,
                              combine_kind /*kind*/, const float* experts_order,
                              float* dispatch_order, float* /*gate_grads*/,
                              exchange_clock& clock) {
  TUTTI_RETURN_IF_ERROR(plan.check_chunk(chunk));
  const auto& ch = plan.chunks[chunk];
  const int64_t d = plan.d, P = plan.members();
  const float* send = pack_chunk(stream_, plan, ch, experts_order, chunk_index_,
                                 chunk_send_);
  // Straight into place when the chunk is every expert (the members'
  // blocks are then adjacent), else through a buffer.
  const bool whole = plan.chunks.size() == 1;
  const int64_t got = std::accumulate(ch.recv.begin(), ch.recv.end(),
                                      int64_t{0});
  if (!whole)
    chunk_recv_.resize(stream_, std::max<int64_t>(got, 1) * d);
  float* recv = whole ? dispatch_order : chunk_recv_.data();
  TUTTI_RETURN_IF_ERROR(exchange_rows(send, ch.send, recv, ch.recv, d, clock));
  if (!whole) {
    int64_t offset = 0;
    for (int64_t q = 0; q < P; ++q) {
      k::copy_on(stream_, dispatch_order + ch.recv_at[q] * d,
                 chunk_recv_.data() + offset * d,
                 ch.recv[q] * d * sizeof(float));
      offset += ch.recv[q];
    }
  }
  return {};
}

status flat_exchange::dispatch_gradient(exchange_plan& plan,
                                        const float* /*dout*/,
                                        const float* dispatch_order,
                                        float* experts_order,
                                        exchange_clock& clock) {
  const int64_t d = plan.d;
  received_.resize(stream_, std::max<int64_t>(plan.recv_rows, 1) * d);
  TUTTI_RETURN_IF_ERROR(exchange_rows(dispatch_order, plan.send,
                                      received_.data(), plan.recv, d, clock));
  k::gather_rows(stream_, received_.data(), plan.regroup.data(), experts_order,
                 plan.recv_rows, d);
  return {};
}

void flat_exchange::reserve(int64_t rows, int64_t d) {
  received_.reserve(stream_, rows * d);
}

} // namespace tutti::moe
