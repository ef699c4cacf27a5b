// The MoE block's all-to-alls: the flat exchange (every row straight to
// the member holding its expert) or the rack-aware one (rack_exchange.hpp),
// whose relays also sum a token's outputs (and input gradients) where that
// gives the same bits and take the output gradient once per rack. Either
// way the block's results are the same bits: the choice changes the
// traffic on each link class and never the numerics.

#include <numeric>

#include "tutti/moe/rack_rows.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/rank_model.hpp"

namespace tutti::train {

namespace k = tutti::kernels;

using moe::rack_rows::times;

status rank_model::dispatch_rows(layer_acts& a, int64_t n, step_timers& time) {
  const int64_t d = cfg_.model.hidden_size, K = cfg_.moe.router_top_k;
  if (!rack_) {
    k::permute_rows(stream_, a.xn2.data(), a.slot_of_row.data(), drows_.data(),
                    a.rows, K, d);
    if (exchanges_by_runs())
      return exchange_by_runs(drows_.data(), a.dispatch_runs, dexp_in_.data(),
                              a.expert_runs, a.send_counts, time);
    return exchange_rows(moe::relay_direction::out_of_origin, drows_.data(),
                         a.send_counts, drecv_.data(), a.recv_counts, time);
  }
  // The relays need each row's token and slot (to send a token once per
  // rack and sum its outputs in slot order) and the gates.
  std::vector<int64_t> row_slot(a.rows);
  if (a.rows > 0) {
    slot_host_.resize(a.rows);
    a.slot_of_row.download(stream_, slot_host_.data(), a.rows);
  }
  for (int64_t r = 0; r < a.rows; ++r)
    row_slot[r] = slot_host_[r];
  const float* gate = a.gate.host_view(stream_, gate_host_);
  k::wait(stream_); // queued kernels count as compute
  rack_->reset_bytes();
  {
    // Every member's per-expert counts ride in the dispatch's count
    // all-reduce: this member's experts' rows from each, [s * L + j].
    const int64_t P = comms_.ep->size(), me = comms_.ep->rank();
    const int64_t E = cfg_.moe.num_experts, L = E / P;
    std::vector<int64_t> counts = a.kept_host;
    exchange_timer t(time, *comms_.ep);
    TUTTI_RETURN_IF_ERROR(rack_->dispatch(
      *comms_.ep, collectives_, a.xn2.data(), n, d, K, row_slot, gate,
      a.send_counts, counts,
      [&](const std::vector<int64_t>& rows) -> expected<float*> {
        for (int64_t s = 0; s < P; ++s)
          for (int64_t j = 0; j < L; ++j)
            a.recv_expert_counts[s * L + j] = counts[s * E + me * L + j];
        plan_receive(a);
        if (rows != a.recv_counts)
          return status::error("rack all-to-all: the members' expert counts "
                               "disagree with the rows they send");
        return drecv_.data();
      },
      a.rack_plan));
  }
  count_sent_bytes(rack_->bytes_to());
  return {};
}

void rank_model::plan_receive(layer_acts& a) {
  const int64_t d = cfg_.model.hidden_size, P = comms_.ep->size();
  const int64_t L = cfg_.moe.num_experts / P;
  a.recv_counts.assign(P, 0);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < L; ++j)
      a.recv_counts[p] += a.recv_expert_counts[p * L + j];
  a.recv_rows = std::accumulate(a.recv_counts.begin(), a.recv_counts.end(),
                                int64_t{0});
  // The received rows regrouped from source-major to expert-major.
  std::vector<int64_t> src_index(a.recv_rows);
  a.rows_per_expert.assign(L, 0);
  std::vector<int64_t> source_start(P, 0);
  for (int64_t p = 1; p < P; ++p)
    source_start[p] = source_start[p - 1] + a.recv_counts[p - 1];
  int64_t i = 0;
  for (int64_t j = 0; j < L; ++j)
    for (int64_t p = 0; p < P; ++p) {
      int64_t start = source_start[p];
      for (int64_t jj = 0; jj < j; ++jj)
        start += a.recv_expert_counts[p * L + jj];
      const int64_t count = a.recv_expert_counts[p * L + j];
      for (int64_t r = 0; r < count; ++r)
        src_index[i++] = start + r;
      a.rows_per_expert[j] += count;
    }
  a.src_index.upload(stream_, src_index);
  drows_.resize(stream_, std::max<int64_t>(a.rows, 1) * d);
  for (auto* buf : {&drecv_, &dexp_in_, &dexp_out_})
    buf->resize(stream_, std::max<int64_t>(a.recv_rows, 1) * d);
}

status rank_model::rack_combine(layer_acts& a, moe::combine_kind kind,
                                const float* send,
                                const std::vector<int64_t>& send_rows,
                                float* recv,
                                const std::vector<int64_t>& recv_rows,
                                step_timers& time) {
  k::wait(stream_); // queued kernels count as compute
  exchange_timer t(time, *comms_.ep);
  rack_->reset_bytes();
  float* dgate = kind == moe::combine_kind::input_gradients ? dgate_.data()
                                                            : nullptr;
  TUTTI_RETURN_IF_ERROR(rack_->combine(*comms_.ep, collectives_, a.rack_plan,
                                       kind, send, send_rows, recv, recv_rows,
                                       dgate, cfg_.model.hidden_size));
  count_sent_bytes(rack_->bytes_to());
  return {};
}

status rank_model::rack_dispatch_gradient(layer_acts& a, const float* dx,
                                          step_timers& time) {
  k::wait(stream_); // queued kernels count as compute
  exchange_timer t(time, *comms_.ep);
  rack_->reset_bytes();
  TUTTI_RETURN_IF_ERROR(rack_->dispatch_gradient(
    *comms_.ep, collectives_, a.rack_plan, dx, drows_.data(), drecv_.data(),
    a.recv_counts, cfg_.model.hidden_size));
  count_sent_bytes(rack_->bytes_to());
  return {};
}

void rank_model::rack_combine_gates(const layer_acts& a, int64_t n) {
  const int64_t slots = n * cfg_.moe.router_top_k;
  const float* gate = a.gate.host_view(stream_, gate_host_);
  gate_mix_.assign(gate, gate + slots);
  moe::combine_gates(a.rack_plan, gate_mix_);
  gate_combine_.upload(stream_, gate_mix_);
}

status rank_model::exchange_rows(moe::relay_direction dir, const float* send,
                                 const std::vector<int64_t>& send_rows,
                                 float* recv,
                                 const std::vector<int64_t>& recv_rows,
                                 step_timers& time) {
  const int64_t d = cfg_.model.hidden_size;
  k::wait(stream_); // queued kernels count as compute
  exchange_timer t(time, *comms_.ep);
  if (!rack_) {
    TUTTI_RETURN_IF_ERROR(collectives_.all_to_all_v(
      *comms_.ep, send, times(send_rows, d), recv, times(recv_rows, d)));
    count_sent_rows(send_rows);
    return {};
  }
  rack_->reset_bytes();
  TUTTI_RETURN_IF_ERROR(rack_->relayed(*comms_.ep, collectives_, dir, send,
                                       send_rows, recv, recv_rows, d));
  count_sent_bytes(rack_->bytes_to());
  return {};
}

void rank_model::plan_runs(layer_acts& a) const {
  const int64_t d = cfg_.model.hidden_size, P = comms_.ep->size();
  const int64_t L = cfg_.moe.num_experts / P;
  a.dispatch_runs.assign(P, {});
  a.expert_runs.assign(P, {});
  int64_t at = 0;
  for (int64_t p = 0; p < P; ++p) {
    a.dispatch_runs[p].push_back({at * d, a.send_counts[p] * d});
    at += a.send_counts[p];
  }
  // Expert j's rows from member p start after the rows of experts before j
  // and of members before p for j.
  int64_t expert_at = 0;
  for (int64_t j = 0; j < L; ++j) {
    int64_t row = expert_at;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t count = a.recv_expert_counts[p * L + j];
      if (count > 0)
        a.expert_runs[p].push_back({row * d, count * d});
      row += count;
    }
    expert_at += a.rows_per_expert[j];
  }
}

status rank_model::exchange_by_runs(
  const float* send, const std::vector<std::vector<comm::slice>>& from,
  float* recv, const std::vector<std::vector<comm::slice>>& to,
  const std::vector<int64_t>& send_rows, step_timers& time) {
  exchange_timer t(time, *comms_.ep);
  TUTTI_RETURN_IF_ERROR(
    comms_.ep->all_to_all_runs(send, from, recv, to, sizeof(float)));
  count_sent_rows(send_rows);
  return {};
}

// Per EP member, for traffic by link class (train_step's stats).
void rank_model::count_sent_rows(const std::vector<int64_t>& rows_to) {
  const int64_t row = cfg_.model.hidden_size * int64_t(sizeof(float));
  std::vector<int64_t> bytes(rows_to.size());
  for (size_t p = 0; p < rows_to.size(); ++p)
    bytes[p] = rows_to[p] * row;
  count_sent_bytes(bytes);
}

void rank_model::count_sent_bytes(const std::vector<int64_t>& bytes_to) {
  if (alltoall_bytes_to_.size() < bytes_to.size())
    alltoall_bytes_to_.resize(bytes_to.size(), 0);
  for (size_t p = 0; p < bytes_to.size(); ++p) {
    alltoall_bytes_to_[p] += bytes_to[p];
    alltoall_bytes_ += bytes_to[p];
  }
}

} // namespace tutti::train
