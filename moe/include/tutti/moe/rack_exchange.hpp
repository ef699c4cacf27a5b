#pragma once
// The rack-aware all-to-all (moe_config.rack_aware_alltoall). Rows bound
// for another rack cross the rack boundary once per (sender, rack), to one
// relay member there that fans them out inside the rack; the way back is
// the mirror: a rack's rows for one member gather at its relay and cross
// in one message. The dispatch also sends each token once per rack, not
// once per chosen expert there (as DeepEP dedups per node before NVLink).
//
// A routed dispatch (training) also leaves a relay_plan (rack_plan.hpp),
// with which the later exchanges of the layer are deduplicated too: the
// combine sums a token's outputs at the relay where that is the same bits
// (its leading top-k slots in one remote rack: every top-2 token whose
// experts share one), the output gradient crosses to a rack once per token
// (the relay computes the rows' gradients and the gate gradients from the
// outputs it kept), and the input gradients are summed there like the
// outputs. The unrouted exchanges leave the receive buffer exactly as the
// flat all_to_all_v would (the same rows in the same order); the routed
// ones leave what the home's kernels then turn into the flat result's bits.
//
// Any expert-to-member map works: callers pass rows packed by member.

#include <cstdint>
#include <functional>
#include <vector>

#include "tutti/comm/communicator.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/kernels/tensor.hpp"
#include "tutti/moe/rack_plan.hpp"
#include "tutti/moe/staged_collectives.hpp"

namespace tutti::moe {

// Where the members of one EP group sit, by rack.
class rack_layout {
public:
  rack_layout() = default;
  // Dense rack ids (0, 1, ...) of members 0..P-1.
  explicit rack_layout(std::vector<int64_t> rack_of_member);
  // The EP group of `world_rank` (job_config::ep_group_of), each member in
  // the cluster_config rack of its node.
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

// What a routed combine carries back: the experts' outputs (summed at the
// relay with their gates) or their input gradients (summed plain).
enum class combine_kind { outputs, input_gradients };

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

  // The same dispatch for a caller that learns what it receives only from
  // the exchange: `also` (X values per member, the same X everywhere)
  // rides in the dispatch's own count all-reduce and comes back as every
  // member's ([s * X + j]); `recv_into(recv_rows)`, called once the rows
  // each member sends here are known, says where they land. It spares the
  // caller an exchange of its own counts before the dispatch.
  using receive_at =
    std::function<expected<float*>(const std::vector<int64_t>&)>;
  status dispatch(comm::communicator& c, staged_collectives& coll,
                  const float* tokens, int64_t d,
                  const std::vector<int64_t>& row_token,
                  const std::vector<int64_t>& send_rows,
                  std::vector<int64_t>& also, const receive_at& recv_into);

  // The routed dispatch: as above, row r the token row_slot[r] / k of
  // `tokens` ([n, d]); `gate` the router's gates [n * k] (host). Fills
  // `plan` for the combine and the backward exchanges of this layer.
  status dispatch(comm::communicator& c, staged_collectives& coll,
                  const float* tokens, int64_t n, int64_t d, int64_t k,
                  const std::vector<int64_t>& row_slot, const float* gate,
                  const std::vector<int64_t>& send_rows, float* recv,
                  const std::vector<int64_t>& recv_rows, relay_plan& plan);
  // The routed dispatch with `also` shared in its counts and the landing
  // told them (as the unrouted one above).
  status dispatch(comm::communicator& c, staged_collectives& coll,
                  const float* tokens, int64_t n, int64_t d, int64_t k,
                  const std::vector<int64_t>& row_slot, const float* gate,
                  const std::vector<int64_t>& send_rows,
                  std::vector<int64_t>& also, const receive_at& recv_into,
                  relay_plan& plan);

  // The combine of a routed dispatch: `send` the owner's rows for each
  // home, packed by home as the dispatch left them (send_rows), to the
  // homes' `recv` ([rows, d], dispatch order, recv_rows by owner): a
  // single row as it was sent, a group's sum on its lead, zeros on its
  // followers (rack_plan.hpp). input_gradients: also the gate gradients
  // of the groups' rows into `dgate` ([n * k], other slots untouched),
  // from dispatch_gradient.
  status combine(comm::communicator& c, staged_collectives& coll,
                 relay_plan& plan, combine_kind kind, const float* send,
                 const std::vector<int64_t>& send_rows, float* recv,
                 const std::vector<int64_t>& recv_rows, float* dgate,
                 int64_t d);

  // The backward of the combine, after the home's own backward of it
  // (unpermute_combine_backward on the rows the combine left: `drows`, the
  // rows' gradients [rows, d], all right; the gate gradients right but for
  // the groups' rows, whose outputs the relays hold). `dout` ([n, d], the
  // combined output's gradient) crosses to a rack once for a token's
  // shared rows there, a lone row's gradient from `drows` otherwise; the
  // relays compute the shared rows' gradients gate * dout (into the
  // owners' `recv`, as the flat exchange of `drows` would leave them) and
  // the groups' gate gradients dot(dout, output), which the input
  // gradients' combine brings home.
  status dispatch_gradient(comm::communicator& c, staged_collectives& coll,
                           relay_plan& plan, const float* dout,
                           const float* drows, float* recv,
                           const std::vector<int64_t>& recv_rows, int64_t d);

  // Rows of d floats, packed by member, through the relays: one message per
  // (member, rack) crosses racks. `recv` ends as the flat exchange leaves it.
  status relayed(comm::communicator& c, staged_collectives& coll,
                 relay_direction dir, const float* send,
                 const std::vector<int64_t>& send_rows, float* recv,
                 const std::vector<int64_t>& recv_rows, int64_t d);
  // The rows the last dispatch() or out-of-origin relayed() brought here,
  // returned to their senders (back to origin; a combine that sums
  // nothing on the way): that exchange's counts, transposed, are this
  // one's, so it shares none (one all-reduce fewer). `send_rows` must be
  // what that exchange delivered here from each member.
  status relayed_back(comm::communicator& c, staged_collectives& coll,
                      const float* send, const std::vector<int64_t>& send_rows,
                      float* recv, const std::vector<int64_t>& recv_rows,
                      int64_t d);

  // Bytes this member sent to each member (itself included: local
  // copies), rows and relay metadata, since the last reset.
  const std::vector<int64_t>& bytes_to() const { return bytes_to_; }
  void reset_bytes() { bytes_to_.assign(layout_.members(), 0); }
  const rack_layout& layout() const { return layout_; }

private:
  // Both routed dispatches.
  status routed(comm::communicator& c, staged_collectives& coll,
                const float* tokens, int64_t n, int64_t d, int64_t k,
                const std::vector<int64_t>& row_slot, const float* gate,
                const std::vector<int64_t>& send_rows,
                std::vector<int64_t>* also, const receive_at& recv_into,
                relay_plan& plan);
  // relayed() once counts_ holds its rows from each member to each.
  status relay_rows(comm::communicator& c, staged_collectives& coll,
                    relay_direction dir, const float* send,
                    const std::vector<int64_t>& send_rows, float* recv,
                    const std::vector<int64_t>& recv_rows, int64_t d);
  // The member that carries rows from s to p.
  int64_t via(relay_direction dir, int64_t s, int64_t p) const;
  // Every member's rows to every member ([s * P + p]), and `extra` values
  // each member adds (its per-rack unique tokens, then `also`), summed
  // over the group.
  status dispatch_rows(comm::communicator& c, staged_collectives& coll,
                       const float* tokens, int64_t d,
                       const std::vector<int64_t>& row_token,
                       const std::vector<int64_t>& send_rows,
                       std::vector<int64_t>* also, const receive_at& recv_into,
                       relay_plan* plan, const float* gate);
  status share_counts(comm::communicator& c,
                      const std::vector<int64_t>& send_rows,
                      std::vector<int64_t>& extra);
  // Stage two and the final regrouping, shared by both exchanges: stage
  // one has left in `stage1` (this member as relay) the rows each sender
  // routed through it; `row_in_stage1(s, p, k)` says where the k-th row
  // from s for p is. Sends them on and regroups what arrives into `recv`.
  using locate = std::function<int64_t(int64_t, int64_t, int64_t)>;
  status fan_out(comm::communicator& c, staged_collectives& coll,
                 relay_direction dir, const float* stage1,
                 const locate& row_in_stage1, float* recv,
                 const std::vector<int64_t>& recv_rows, int64_t d);
  // The routed combine's first stage: owners to relays, into `into`
  // ([relay rows + groups, d]).
  status combine_to_relays(comm::communicator& c, staged_collectives& coll,
                           const relay_plan& plan, const float* send,
                           kernels::tensor<float>& into, int64_t d);
  // Its second stage: each home's rows (and gate gradients) from `pool`,
  // landed in the home's `recv` and `dgate`.
  status combine_to_homes(comm::communicator& c, staged_collectives& coll,
                          const relay_plan& plan, const float* pool,
                          const float* slots, float* recv, float* dgate,
                          int64_t d);
  void count(const std::vector<int64_t>& rows_to, int64_t bytes_per_row);

  rack_layout layout_;
  kernels::stream stream_;
  std::vector<int64_t> counts_; // [s * P + p] rows, then extras
  std::vector<int64_t> bytes_to_;
  kernels::tensor<float> send_, stage1_, stage2_, group_in_, grads_, vgate_,
    vdgate_;
  kernels::tensor<int64_t> index_, index2_;
  kernels::tensor<int32_t> slots_;
};

} // namespace tutti::moe
