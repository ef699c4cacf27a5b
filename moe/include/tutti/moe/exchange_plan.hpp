#pragma once
// What an EP group's exchange of one layer's routed rows works from and
// leaves behind (token_exchange.hpp).
//
// Orders. A member's rows leave in dispatch order: packed by the member
// holding their expert, by expert within it (what permute_plan gives).
// They arrive in the experts' order: by local expert, by sender within it
// (what an expert shard takes). The way back is the mirror.
//
// Experts are positions 0..E-1 of the layer; member p holds positions
// [expert_first[p], expert_first[p + 1]). Training gives every member
// E / P of them; a serving layout may give members different numbers.

#include <cstdint>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/comm/slices.hpp"
#include "tutti/kernels/tensor.hpp"
#include "tutti/moe/rack_plan.hpp"

namespace tutti::moe {

// One layer's rows to dispatch from this member.
struct routed_rows {
  const float* tokens = nullptr; // [tokens, d], in the stream's memory
  int64_t tokens_count = 0, d = 0, k = 0;
  // [rows], the stream's memory: dispatch row r is a copy of token
  // slot_of_row[r] / k (its slot: token * k + rank among its top-k).
  const int32_t* slot_of_row = nullptr;
  int64_t rows = 0;
  std::vector<int64_t> expert_rows;  // [E], host: rows for each expert
  std::vector<int64_t> expert_first; // [P + 1], host
  // [tokens * k], the stream's memory, or null: the router's gates. An
  // exchange that sums a token's outputs on the way (the rack relays)
  // needs them; the others ignore them.
  const float* gates = nullptr;
};

// The layer's exchange as this member sees it: filled by the dispatch,
// kept with the layer's activations until its backward pass.
struct exchange_plan {
  int64_t d = 0, k = 0, tokens = 0;
  std::vector<int64_t> expert_first; // as routed_rows
  std::vector<int64_t> send_expert;  // [E] rows this member sends each expert
  std::vector<int64_t> expert_start; // [E + 1] dispatch row of each expert's
  std::vector<int64_t> send, recv;   // [P] rows to, and from, each member
  std::vector<int64_t> recv_expert;  // [P * mine]: member p's for local j
  std::vector<int64_t> rows_per_expert; // [mine] rows of each local expert
  int64_t rows = 0, recv_rows = 0;      // sent, received

  // The way back goes in chunks of local experts, so that chunk c travels
  // while the experts compute chunk c + 1. Chunk c of every member holds
  // its local experts [c * mine / C, (c + 1) * mine / C).
  struct chunk {
    int64_t first = 0, last = 0;     // this member's local experts
    int64_t start = 0, rows = 0;     // their rows in the experts' order
    std::vector<int64_t> send, recv; // [P] rows to and from each member
    std::vector<int64_t> recv_at;    // [P] dispatch row of member q's block
    std::vector<int64_t> rows_per_expert; // [mine], zero outside the chunk
  };
  std::vector<chunk> chunks;

  // The exchanges' own.
  // Flat and rack: the received row (by sender) of each experts'-order row.
  kernels::tensor<int64_t> regroup;
  // In-process by runs: per member, its block of the dispatch order, and
  // its rows of each local expert in the experts' order (floats).
  std::vector<std::vector<comm::slice>> dispatch_runs, expert_runs;
  // Rack, routed: the relays' plan of the layer's exchanges, and the gates
  // the home's combine weighs its rows with (rack_plan.hpp), which are in
  // use while `summed` (kept between layers so the memory stays).
  relay_plan relays;
  kernels::tensor<float> relay_gates;
  bool summed = false;

  int64_t members() const { return int64_t(send.size()); }
  int64_t local_experts() const { return int64_t(rows_per_expert.size()); }
  // An error naming `chunk` when the way back has no such chunk.
  status check_chunk(size_t chunk) const;
  // Rows of each local expert per chunk, as expert_executor's
  // forward_chunks and backward_chunks take them.
  std::vector<std::vector<int64_t>> chunk_rows() const;
  // The gates for unpermute_combine at home: the router's `gates`, unless
  // the rows came back summed on the way (then 1 on a group's lead, 0 on
  // its followers).
  const float* combine_gates(const float* gates) const {
    return summed ? relay_gates.data() : gates;
  }
};

// Fills the dispatch side of `plan` from `rows` (checked against a group
// of `members`), and sizes recv_expert for member `me`.
status plan_dispatch(const routed_rows& rows, int64_t members, int64_t me,
                     exchange_plan& plan);
// Fills the receive side from recv_expert (set by the exchange), and
// `chunks` chunks for the way back.
void plan_receive(exchange_plan& plan, int64_t me, int64_t chunks);
// The regroup index (host) from received order to the experts' order.
std::vector<int64_t> regroup_index(const exchange_plan& plan);
// dispatch_runs and expert_runs for an exchange by runs.
void plan_runs(exchange_plan& plan);

} // namespace tutti::moe
