// The bookkeeping every exchange shares (exchange_plan.hpp): from the
// per-expert counts to the rows per member both ways, the regrouping into
// the experts' order, the runs of the in-process exchange and the chunks
// of the way back. Counts only: no rows move here.

#include "tutti/moe/exchange_plan.hpp"

#include <algorithm>
#include <numeric>
#include <string>

namespace tutti::moe {

status exchange_plan::check_chunk(size_t chunk) const {
  if (chunk >= chunks.size())
    return status::error("moe exchange: no chunk " + std::to_string(chunk));
  return {};
}

std::vector<std::vector<int64_t>> exchange_plan::chunk_rows() const {
  std::vector<std::vector<int64_t>> rows;
  rows.reserve(chunks.size());
  for (const auto& ch : chunks)
    rows.push_back(ch.rows_per_expert);
  return rows;
}

status plan_dispatch(const routed_rows& rows, int64_t members, int64_t me,
                     exchange_plan& plan) {
  const auto& first = rows.expert_first;
  const int64_t P = members;
  if (int64_t(first.size()) != P + 1 || first[0] != 0)
    return status::error("moe exchange: experts split over "
                         + std::to_string(int64_t(first.size()) - 1)
                         + " members, the group has " + std::to_string(P));
  for (int64_t p = 0; p < P; ++p)
    if (first[p + 1] < first[p])
      return status::error("moe exchange: member " + std::to_string(p)
                           + "'s experts end before they begin");
  const int64_t E = first[P];
  if (int64_t(rows.expert_rows.size()) != E
      || std::accumulate(rows.expert_rows.begin(), rows.expert_rows.end(),
                         int64_t{0})
           != rows.rows)
    return status::error(
      "moe exchange: " + std::to_string(rows.rows) + " rows, the counts of "
      + std::to_string(rows.expert_rows.size()) + " experts say otherwise ("
      + std::to_string(E) + " experts)");
  if (rows.d < 1 || rows.k < 1 || (rows.rows > 0 && !rows.slot_of_row))
    return status::error("moe exchange: rows of " + std::to_string(rows.d)
                         + " floats, top-" + std::to_string(rows.k)
                         + ", without their slots");
  plan.d = rows.d;
  plan.k = rows.k;
  plan.tokens = rows.tokens_count;
  plan.rows = rows.rows;
  plan.expert_first = first;
  plan.send_expert = rows.expert_rows;
  plan.expert_start.assign(E + 1, 0);
  std::partial_sum(plan.send_expert.begin(), plan.send_expert.end(),
                   plan.expert_start.begin() + 1);
  plan.send.assign(P, 0);
  for (int64_t p = 0; p < P; ++p)
    plan.send[p] = plan.expert_start[first[p + 1]]
                   - plan.expert_start[first[p]];
  plan.recv_expert.assign(P * (first[me + 1] - first[me]), 0);
  plan.summed = false;
  return {};
}

void plan_receive(exchange_plan& plan, int64_t me, int64_t chunks) {
  const auto& first = plan.expert_first;
  const int64_t P = plan.members(), L = first[me + 1] - first[me];
  plan.recv.assign(P, 0);
  plan.rows_per_expert.assign(L, 0);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < L; ++j) {
      plan.recv[p] += plan.recv_expert[p * L + j];
      plan.rows_per_expert[j] += plan.recv_expert[p * L + j];
    }
  plan.recv_rows = std::accumulate(plan.recv.begin(), plan.recv.end(),
                                   int64_t{0});
  // Chunk c of member q: its local experts [c * L_q / C, (c + 1) * L_q / C),
  // whose rows from here are consecutive in the dispatch order.
  const int64_t C = std::max<int64_t>(chunks, 1);
  plan.chunks.assign(C, {});
  int64_t start = 0;
  for (int64_t c = 0; c < C; ++c) {
    auto& ch = plan.chunks[c];
    ch.first = c * L / C;
    ch.last = (c + 1) * L / C;
    ch.start = start;
    ch.send.assign(P, 0);
    ch.recv.assign(P, 0);
    ch.recv_at.assign(P, 0);
    ch.rows_per_expert.assign(L, 0);
    for (int64_t j = ch.first; j < ch.last; ++j) {
      ch.rows_per_expert[j] = plan.rows_per_expert[j];
      ch.rows += plan.rows_per_expert[j];
      for (int64_t p = 0; p < P; ++p)
        ch.send[p] += plan.recv_expert[p * L + j];
    }
    for (int64_t q = 0; q < P; ++q) {
      const int64_t Lq = first[q + 1] - first[q];
      const int64_t from = first[q] + c * Lq / C;
      const int64_t to = first[q] + (c + 1) * Lq / C;
      ch.recv_at[q] = plan.expert_start[from];
      ch.recv[q] = plan.expert_start[to] - plan.expert_start[from];
    }
    start += ch.rows;
  }
}

std::vector<int64_t> regroup_index(const exchange_plan& plan) {
  const int64_t P = plan.members(), L = plan.local_experts();
  // Received rows are by sender, then local expert; the experts' order is
  // by local expert, then sender.
  std::vector<int64_t> index(plan.recv_rows);
  std::vector<int64_t> sender_start(P, 0);
  for (int64_t p = 1; p < P; ++p)
    sender_start[p] = sender_start[p - 1] + plan.recv[p - 1];
  int64_t i = 0;
  for (int64_t j = 0; j < L; ++j)
    for (int64_t p = 0; p < P; ++p) {
      int64_t start = sender_start[p];
      for (int64_t jj = 0; jj < j; ++jj)
        start += plan.recv_expert[p * L + jj];
      for (int64_t r = 0; r < plan.recv_expert[p * L + j]; ++r)
        index[i++] = start + r;
    }
  return index;
}

void plan_runs(exchange_plan& plan) {
  const int64_t d = plan.d, P = plan.members(), L = plan.local_experts();
  plan.dispatch_runs.assign(P, {});
  plan.expert_runs.assign(P, {});
  int64_t at = 0;
  for (int64_t p = 0; p < P; ++p) {
    plan.dispatch_runs[p].push_back({at * d, plan.send[p] * d});
    at += plan.send[p];
  }
  // Expert j's rows from member p start after the rows of experts before j
  // and of members before p for j.
  int64_t expert_at = 0;
  for (int64_t j = 0; j < L; ++j) {
    int64_t row = expert_at;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t count = plan.recv_expert[p * L + j];
      if (count > 0)
        plan.expert_runs[p].push_back({row * d, count * d});
      row += count;
    }
    expert_at += plan.rows_per_expert[j];
  }
}

} // namespace tutti::moe
