// Members in one process, on the CPU: every collective is the members'
// own copies from each other's buffers (memory_communicator), so the rows
// go straight from the dispatch order into the experts' order and back
// (all_to_all_runs), with no regrouping copies around a packed exchange,
// and the way back goes in one chunk: chunks would compete with the
// experts for the same cores and only add steps.

#include "exchanges.hpp"

namespace tutti::moe {

namespace k = tutti::kernels;

status runs_exchange::dispatch_rows(const routed_rows& rows,
                                    exchange_plan& plan,
                                    k::tensor<float>& dispatch_order,
                                    const landing& land,
                                    exchange_clock& clock) {
  auto landed = plan_and_land(
    rows, plan, land, [&](exchange_plan& p) { return share_counts(p, clock); });
  if (!landed.ok())
    return landed.error();
  plan_runs(plan);
  const int64_t d = plan.d;
  dispatch_order.resize(stream_, std::max<int64_t>(plan.rows, 1) * d);
  k::permute_rows(stream_, rows.tokens, rows.slot_of_row, dispatch_order.data(),
                  plan.rows, plan.k, d);
  {
    clocked t(clock, stream_);
    TUTTI_RETURN_IF_ERROR(
      group_.all_to_all_runs(dispatch_order.data(), plan.dispatch_runs,
                             landed.value(), plan.expert_runs, sizeof(float)));
  }
  count_rows(plan.send, d);
  return {};
}

status runs_exchange::combine(exchange_plan& plan, size_t chunk,
                              combine_kind /*kind*/, const float* experts_order,
                              float* dispatch_order, float* /*gate_grads*/,
                              exchange_clock& clock) {
  TUTTI_RETURN_IF_ERROR(plan.check_chunk(chunk));
  {
    clocked t(clock, stream_);
    TUTTI_RETURN_IF_ERROR(
      group_.all_to_all_runs(experts_order, plan.expert_runs, dispatch_order,
                             plan.dispatch_runs, sizeof(float)));
  }
  count_rows(plan.chunks[chunk].send, plan.d);
  return {};
}

status runs_exchange::dispatch_gradient(exchange_plan& plan,
                                        const float* /*dout*/,
                                        const float* dispatch_order,
                                        float* experts_order,
                                        exchange_clock& clock) {
  {
    clocked t(clock, stream_);
    TUTTI_RETURN_IF_ERROR(
      group_.all_to_all_runs(dispatch_order, plan.dispatch_runs, experts_order,
                             plan.expert_runs, sizeof(float)));
  }
  count_rows(plan.send, plan.d);
  return {};
}

} // namespace tutti::moe
