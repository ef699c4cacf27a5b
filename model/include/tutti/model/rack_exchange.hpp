#pragma once
// The rack-aware all-to-all (moe_config.rack_aware_alltoall). Rows bound
// for another rack cross the rack boundary once per (sender, rack), to one
// relay member there that fans them out inside the rack; the way back is
// the mirror: a rack's rows for one member gather at its relay and cross
// in one message. The dispatch also sends each token once per rack, not
// once per chosen expert there (as DeepEP dedups per node before NVLink).
//
// Every exchange leaves the receive buffer exactly as the flat
// all_to_all_v would: the same rows in the same order. So the experts, the
// combine's sum and every gradient are the same bits; only the path and
// the bytes on each link change. The combine is not summed inside the
// remote rack: a partial sum there would add a token's expert outputs in a
// different order (and the backward pass needs each output anyway), so
// the outputs travel back per expert, batched per rack.
//
// Any expert-to-member map works: callers pass rows packed by member.

#include <cstdint>
#include <vector>

#include "tutti/comm/communicator.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/kernels/tensor.hpp"
#include "tutti/model/staged_collectives.hpp"

namespace tutti::model {

// Where the members of one EP group sit, by rack.
class rack_layout {
public:
  rack_layout() = default;
  // Dense rack ids (0, 1, ...) of members 0..P-1.
  explicit rack_layout(std::vector<int64_t> rack_of_member);
  // The EP group of `world_rank`: member p is world rank first + p, on node
  // (first + p) / nproc_per_node, in that node's cluster_config rack.
  static rack_layout of_group(const job_config& cfg, int64_t world_rank);

  int64_t members() const { return int64_t(rack_of_.size()); }
  int64_t racks() const { return int64_t(in_rack_.size()); }
  int64_t rack_of(int64_t member) const { return rack_of_[member]; }
  const std::vector<int64_t>& in_rack(int64_t rack) const {
    return in_rack_[rack];
  }
  // The member of `rack` through which `origin`'s rows enter and leave it:
  // origin itself in its own rack, else the member at origin's position in
  // its own rack (modulo that rack's size), so the relays spread out.
  int64_t relay(int64_t origin, int64_t rack) const;

private:
  std::vector<int64_t> rack_of_, position_;
  std::vector<std::vector<int64_t>> in_rack_;
};

// Which end of a relayed exchange is the token's home: the dispatch goes
// out of it (relay in the receiver's rack, chosen by the sender), the
// combine back to it (relay in the sender's rack, chosen by the receiver).
enum class relay_direction { out_of_origin, back_to_origin };

class rack_exchange {
public:
  rack_exchange(rack_layout layout, kernels::stream s);

  // The dispatch: `send_rows[p]` rows for member p, packed in member
  // order, row r a copy of row `row_token[r]` of `tokens` ([n, d]). Each
  // token crosses to a rack once; its relay there hands every member the
  // rows it wants. `recv` ends as the flat all_to_all_v leaves it.
  status dispatch(comm::communicator& c, staged_collectives& coll,
                  const float* tokens, int64_t d,
                  const std::vector<int64_t>& row_token,
                  const std::vector<int64_t>& send_rows, float* recv,
                  const std::vector<int64_t>& recv_rows);

  // Rows of d floats, packed by member, through the relays: one message per
  // (member, rack) crosses racks. `recv` ends as the flat exchange leaves it.
  status relayed(comm::communicator& c, staged_collectives& coll,
                 relay_direction dir, const float* send,
                 const std::vector<int64_t>& send_rows, float* recv,
                 const std::vector<int64_t>& recv_rows, int64_t d);

  // Bytes this member sent to each member (itself included: local
  // copies), rows and relay metadata, since the last reset.
  const std::vector<int64_t>& bytes_to() const { return bytes_to_; }
  void reset_bytes() { bytes_to_.assign(layout_.members(), 0); }
  const rack_layout& layout() const { return layout_; }

private:
  // The member that carries rows from s to p.
  int64_t via(relay_direction dir, int64_t s, int64_t p) const;
  // Every member's rows to every member ([s * P + p]), and `extra` values
  // each member adds (its per-rack unique tokens), summed over the group.
  status share_counts(comm::communicator& c,
                      const std::vector<int64_t>& send_rows,
                      std::vector<int64_t>& extra);
  // Stage two and the final regrouping, shared by both exchanges: stage
  // one has left in stage1_ (this member as relay) the rows each sender
  // routed through it; `row_in_stage1(s, p, k)` says where the k-th row
  // from s for p is. Sends them on and regroups what arrives into `recv`.
  template <class Locate>
  status fan_out(comm::communicator& c, staged_collectives& coll,
                 relay_direction dir, Locate row_in_stage1, float* recv,
                 const std::vector<int64_t>& recv_rows, int64_t d);
  void count(const std::vector<int64_t>& rows_to, int64_t bytes_per_row);

  rack_layout layout_;
  kernels::stream stream_;
  std::vector<int64_t> counts_; // [s * P + p] rows, then extras
  std::vector<int64_t> bytes_to_;
  kernels::tensor<float> send_, stage1_, stage2_;
  kernels::tensor<int64_t> index_;
};

} // namespace tutti::model
