// An EP group of one. Its exchanges would copy rows onto themselves, and
// the dispatch order is already the experts' order: the dispatch only
// permutes the tokens into it, and the way back and the gradients' dispatch
// move nothing when the caller hands the same buffer as both orders. The
// bytes are counted as sent to itself, as the other strategies count
// theirs.

#include "exchanges.hpp"

namespace tutti::moe {

namespace k = tutti::kernels;

status self_exchange::dispatch_rows(const routed_rows& rows,
                                    exchange_plan& plan,
                                    k::tensor<float>& /*dispatch_order*/,
                                    const landing& land,
                                    exchange_clock& /*clock*/) {
  auto landed = plan_and_land(rows, plan, land, [](exchange_plan& p) {
    p.recv_expert = p.send_expert;
    return status{};
  });
  if (!landed.ok())
    return landed.error();
  k::permute_rows(stream_, rows.tokens, rows.slot_of_row, landed.value(),
                  plan.rows, plan.k, plan.d);
  count_rows(plan.send, plan.d);
  return {};
}

status self_exchange::combine(exchange_plan& plan, size_t chunk,
                              combine_kind /*kind*/, const float* experts_order,
                              float* dispatch_order, float* /*gate_grads*/,
                              exchange_clock& /*clock*/) {
  TUTTI_RETURN_IF_ERROR(plan.check_chunk(chunk));
  const auto& ch = plan.chunks[chunk];
  const int64_t d = plan.d;
  if (experts_order != dispatch_order)
    k::copy_on(stream_, dispatch_order + ch.start * d,
               experts_order + ch.start * d, ch.rows * d * sizeof(float));
  count_rows(ch.send, d);
  return {};
}

status self_exchange::dispatch_gradient(exchange_plan& plan,
                                        const float* /*dout*/,
                                        const float* dispatch_order,
                                        float* experts_order,
                                        exchange_clock& /*clock*/) {
  if (experts_order != dispatch_order)
    k::copy_on(stream_, experts_order, dispatch_order,
               plan.rows * plan.d * sizeof(float));
  count_rows(plan.send, plan.d);
  return {};
}

} // namespace tutti::moe
