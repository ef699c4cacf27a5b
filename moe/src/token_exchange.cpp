// What the strategies share (the counts' flat exchange, byte accounting,
// the way back's packing by member) and the one place that chooses
// between them.

#include "tutti/moe/token_exchange.hpp"

#include "exchanges.hpp"

namespace tutti::moe {

namespace k = tutti::kernels;

expected<float*> token_exchange::plan_and_land(
  const routed_rows& rows, exchange_plan& plan, const landing& land,
  const std::function<status(exchange_plan&)>& share) {
  TUTTI_RETURN_IF_ERROR(
    plan_dispatch(rows, group_.size(), group_.rank(), plan));
  TUTTI_RETURN_IF_ERROR(share(plan));
  plan_receive(plan, group_.rank(), chunks_);
  return land(plan);
}

status token_exchange::share_counts(exchange_plan& plan,
                                    exchange_clock& clock) {
  const auto& first = plan.expert_first;
  const int64_t P = plan.members(), me = group_.rank();
  std::vector<int64_t> send_n(P), recv_n(P, first[me + 1] - first[me]);
  for (int64_t p = 0; p < P; ++p)
    send_n[p] = first[p + 1] - first[p];
  clocked t(clock, stream_);
  return group_.all_to_all_v(plan.send_expert.data(), send_n,
                             plan.recv_expert.data(), recv_n, sizeof(int64_t));
}

void token_exchange::count_rows(const std::vector<int64_t>& rows_to,
                                int64_t d) {
  const int64_t row = d * int64_t(sizeof(float));
  for (size_t p = 0; p < rows_to.size() && p < bytes_to_.size(); ++p)
    bytes_to_[p] += rows_to[p] * row;
}

void token_exchange::count_bytes(const std::vector<int64_t>& bytes_to) {
  for (size_t p = 0; p < bytes_to.size() && p < bytes_to_.size(); ++p)
    bytes_to_[p] += bytes_to[p];
}

const float* pack_chunk(const k::stream& s, const exchange_plan& plan,
                        const exchange_plan::chunk& ch,
                        const float* experts_order, k::tensor<int64_t>& index,
                        k::tensor<float>& out) {
  const int64_t d = plan.d, P = plan.members(), L = plan.local_experts();
  const float* rows = experts_order + ch.start * d;
  if (ch.last - ch.first <= 1)
    return rows;
  std::vector<int64_t> at_row;
  at_row.reserve(ch.rows);
  for (int64_t p = 0; p < P; ++p) {
    int64_t expert_at = 0; // row of expert j within the chunk
    for (int64_t j = ch.first; j < ch.last; ++j) {
      int64_t at = expert_at;
      for (int64_t q = 0; q < p; ++q)
        at += plan.recv_expert[q * L + j];
      for (int64_t r = 0; r < plan.recv_expert[p * L + j]; ++r)
        at_row.push_back(at + r);
      expert_at += plan.rows_per_expert[j];
    }
  }
  index.upload(s, at_row);
  out.resize(s, std::max<int64_t>(ch.rows, 1) * d);
  k::gather_rows(s, rows, index.data(), out.data(), ch.rows, d);
  return out.data();
}

namespace {

std::unique_ptr<token_exchange> make_strategy(comm::communicator& group,
                                              k::stream s,
                                              const exchange_options& o) {
  if (o.rack_aware && o.racks.racks() > 1)
    return std::make_unique<rack_token_exchange>(group, s, o.racks);
  if (group.size() == 1)
    return std::make_unique<self_exchange>(group, s);
  if (group.in_process() && s.device == k::device_kind::cpu)
    return std::make_unique<runs_exchange>(group, s);
  const int64_t chunks = group.in_process() ? 1 : o.combine_chunks;
  return std::make_unique<flat_exchange>(group, s,
                                         std::max<int64_t>(chunks, 1));
}

} // namespace

expected<std::unique_ptr<token_exchange>> make_token_exchange(
  comm::communicator& group, k::stream s, const exchange_options& o) {
  if (o.rack_aware && o.racks.racks() > 1 && o.racks.members() != group.size())
    return status::error(
      "moe exchange: racks for " + std::to_string(o.racks.members())
      + " members, the EP group has " + std::to_string(group.size()));
  // The quantizer is a CPU kernel (kernels/row_quant.hpp).
  if (o.dispatch != dispatch_dtype::fp32 && s.device != k::device_kind::cpu)
    return status::error(std::string("moe exchange: dispatch_dtype ")
                         + to_string(o.dispatch)
                         + " runs on CPU ranks only (use fp32 on cuda)");
  auto made = make_strategy(group, s, o);
  made->dtype_ = o.dispatch;
  return made;
}

} // namespace tutti::moe
