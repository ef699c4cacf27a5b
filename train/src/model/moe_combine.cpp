// The combine of the MoE block in chunks of a rank's local experts: chunk
// c's outputs go back to their ranks while the expert shard computes chunk
// c+1 (expert_executor::forward_chunks), and in the backward pass chunk c's
// input gradients while it computes c+1's (backward_chunks). Data movement
// only: the result is the same bits as one combine. An EP group within one
// process (memory_communicator) combines in one chunk.
//
// Chunk c holds local experts [first, last). Its rows leave in member order
// (for each member p, its rows of each expert of the chunk), and from
// member q arrive the rows this rank sent to q's experts [first, last),
// which are consecutive in the dispatch order: one block per member.

#include <numeric>

#include "tutti/kernels/ops.hpp"
#include "tutti/train/rank_model.hpp"

namespace tutti::train {

namespace k = tutti::kernels;

void rank_model::plan_combine(const layer_acts& a) {
  const int64_t E = cfg_.moe.num_experts, P = comms_.ep->size(), L = E / P;
  // In one process the combine is the ranks' own copies, competing with
  // the experts for the same cores: chunking it would only add steps. The
  // rack relays sum and batch a rack's outputs for a member into one
  // message: one chunk.
  const int64_t C = comms_.ep->in_process() || rack_
                      ? 1
                      : combine_chunk_count(cfg_);
  expert_start_.assign(E + 1, 0);
  for (int64_t e = 0; e < E; ++e)
    expert_start_[e + 1] = expert_start_[e] + a.kept_host[e];
  combine_.assign(C, {});
  int64_t start = 0;
  for (int64_t c = 0; c < C; ++c) {
    auto& ch = combine_[c];
    ch.first = c * L / C;
    ch.last = (c + 1) * L / C;
    ch.start = start;
    ch.send.assign(P, 0);
    ch.recv.assign(P, 0);
    ch.rows_per_expert.assign(L, 0);
    for (int64_t j = ch.first; j < ch.last; ++j) {
      ch.rows_per_expert[j] = a.rows_per_expert[j];
      ch.rows += a.rows_per_expert[j];
      for (int64_t p = 0; p < P; ++p) {
        ch.send[p] += a.recv_expert_counts[p * L + j];
        ch.recv[p] += a.kept_host[p * L + j];
      }
    }
    start += ch.rows;
  }
}

std::vector<std::vector<int64_t>> rank_model::combine_chunk_rows() const {
  std::vector<std::vector<int64_t>> rows;
  for (const auto& ch : combine_)
    rows.push_back(ch.rows_per_expert);
  return rows;
}

status rank_model::combine_chunk(layer_acts& a, size_t c,
                                 const tensor<float>& expert_major,
                                 tensor<float>& dispatch_order,
                                 moe::combine_kind kind, step_timers& time) {
  const int64_t d = cfg_.model.hidden_size, P = comms_.ep->size();
  const int64_t L = cfg_.moe.num_experts / P;
  const auto& ch = combine_[c];
  if (exchanges_by_runs()) // one chunk (plan_combine): the dispatch reversed
    return exchange_by_runs(expert_major.data(), a.expert_runs,
                            dispatch_order.data(), a.dispatch_runs, ch.send,
                            time);
  // Send side: expert-major (for each expert, each member's rows) to member
  // order; one expert's rows are in member order already.
  const float* send = expert_major.data() + ch.start * d;
  if (ch.last - ch.first > 1) {
    std::vector<int64_t> index;
    index.reserve(ch.rows);
    for (int64_t p = 0; p < P; ++p) {
      int64_t expert_at = 0; // row of expert j within the chunk
      for (int64_t j = ch.first; j < ch.last; ++j) {
        int64_t at = expert_at;
        for (int64_t q = 0; q < p; ++q)
          at += a.recv_expert_counts[q * L + j];
        for (int64_t r = 0; r < a.recv_expert_counts[p * L + j]; ++r)
          index.push_back(at + r);
        expert_at += a.rows_per_expert[j];
      }
    }
    combine_index_.upload(stream_, index);
    dsend_.resize(stream_, std::max<int64_t>(ch.rows, 1) * d);
    k::gather_rows(stream_, send, combine_index_.data(), dsend_.data(), ch.rows,
                   d);
    send = dsend_.data();
  }
  // Receive side: straight into place when the chunk is every expert (the
  // members' blocks are then adjacent), else through a buffer.
  const bool whole = combine_.size() == 1;
  const int64_t got = std::accumulate(ch.recv.begin(), ch.recv.end(),
                                      int64_t{0});
  if (!whole)
    dcombine_.resize(stream_, std::max<int64_t>(got, 1) * d);
  float* recv = whole ? dispatch_order.data() : dcombine_.data();
  if (rack_) // one chunk: the relays' sums land in dispatch order
    return rack_combine(a, kind, send, ch.send, recv, ch.recv, time);
  TUTTI_RETURN_IF_ERROR(exchange_rows(moe::relay_direction::back_to_origin,
                                      send, ch.send, recv, ch.recv, time));
  if (!whole) {
    int64_t offset = 0;
    for (int64_t q = 0; q < P; ++q) {
      k::copy_on(stream_,
                 dispatch_order.data() + expert_start_[q * L + ch.first] * d,
                 dcombine_.data() + offset * d, ch.recv[q] * d * sizeof(float));
      offset += ch.recv[q];
    }
  }
  return {};
}

} // namespace tutti::train
