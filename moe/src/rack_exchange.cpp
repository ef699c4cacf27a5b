#include "tutti/moe/rack_exchange.hpp"

#include <algorithm>
#include <utility>
#include <climits>
#include <cstring>
#include <numeric>
#include <string>

#include "tutti/moe/rack_rows.hpp"
#include "tutti/kernels/ops.hpp"

namespace tutti::moe {

namespace k = tutti::kernels;

using namespace rack_rows;

namespace {
// Where a caller that knows what it receives has the rows land: `recv`,
// once the counts agree with its own.
rack_exchange::receive_at receive_into(float* recv,
                                       const std::vector<int64_t>& recv_rows) {
  return [recv, &recv_rows](const std::vector<int64_t>& rows)
           -> expected<float*> {
    if (rows.size() != recv_rows.size())
      return status::error("rack all-to-all: rows from "
                           + std::to_string(rows.size()) + " members, "
                           + std::to_string(recv_rows.size()) + " expected");
    for (size_t s = 0; s < rows.size(); ++s)
      if (rows[s] != recv_rows[s])
        return status::error("rack all-to-all: member " + std::to_string(s)
                             + " sends " + std::to_string(rows[s])
                             + " rows, " + std::to_string(recv_rows[s])
                             + " expected");
    return recv;
  };
}
} // namespace

rack_layout::rack_layout(std::vector<int64_t> rack_of_member)
  : rack_of_(std::move(rack_of_member)), position_(rack_of_.size()) {
  for (size_t p = 0; p < rack_of_.size(); ++p) {
    const auto r = static_cast<size_t>(rack_of_[p]);
    if (r >= in_rack_.size())
      in_rack_.resize(r + 1);
    position_[p] = int64_t(in_rack_[r].size());
    in_rack_[r].push_back(int64_t(p));
  }
}

rack_layout rack_layout::of_group(const job_config& cfg, int64_t world_rank) {
  const int64_t per_node = std::max<int64_t>(cfg.cluster.nproc_per_node, 1);
  std::vector<std::string> names;
  std::vector<int64_t> racks;
  for (const int64_t member : cfg.ep_group_of(world_rank)) {
    const auto name = cfg.cluster.node(member / per_node).rack;
    auto at = std::find(names.begin(), names.end(), name);
    if (at == names.end())
      at = names.insert(names.end(), name);
    racks.push_back(at - names.begin());
  }
  return rack_layout(std::move(racks));
}

int64_t rack_layout::relay(int64_t origin, int64_t rack) const {
  if (rack_of_[origin] == rack)
    return origin;
  const auto& there = in_rack_[rack];
  return there[position_[origin] % int64_t(there.size())];
}

rack_exchange::rack_exchange(rack_layout layout, kernels::stream s)
  : layout_(std::move(layout)), stream_(s) {
  reset_bytes();
}

int64_t rack_exchange::via(relay_direction dir, int64_t s, int64_t p) const {
  return dir == relay_direction::out_of_origin
           ? layout_.relay(s, layout_.rack_of(p))
           : layout_.relay(p, layout_.rack_of(s));
}

void rack_exchange::count(const std::vector<int64_t>& rows_to,
                          int64_t bytes_per_row) {
  for (size_t p = 0; p < rows_to.size(); ++p)
    bytes_to_[p] += rows_to[p] * bytes_per_row;
}

status rack_exchange::share_counts(comm::communicator& c,
                                   const std::vector<int64_t>& send_rows,
                                   std::vector<int64_t>& extra) {
  const int64_t P = layout_.members(), me = c.rank();
  const int64_t X = int64_t(extra.size());
  if (c.size() != P || int64_t(send_rows.size()) != P)
    return status::error("rack all-to-all: the EP group has "
                         + std::to_string(c.size()) + " members, the rack "
                         + "layout " + std::to_string(P));
  counts_.assign(P * P + P * X, 0);
  std::copy(send_rows.begin(), send_rows.end(), counts_.begin() + me * P);
  std::copy(extra.begin(), extra.end(), counts_.begin() + P * P + me * X);
  // A relay must know what passes through it, which only the senders do.
  TUTTI_RETURN_IF_ERROR(c.all_reduce_sum(counts_.data(), counts_.size()));
  // extra becomes everyone's: [s * X + j].
  extra.assign(counts_.begin() + P * P, counts_.end());
  return {};
}

status rack_exchange::fan_out(comm::communicator& c, staged_collectives& coll,
                              relay_direction dir, const float* stage1,
                              const locate& row_in_stage1, float* recv,
                              const std::vector<int64_t>& recv_rows,
                              int64_t d) {
  const int64_t P = layout_.members(), me = c.rank();
  auto rows = [&](int64_t s, int64_t p) { return counts_[s * P + p]; };
  // Stage two, as relay: to each member, the rows each sender routed
  // through this member for it, senders in order.
  std::vector<int64_t> index, send2(P, 0), recv2(P, 0);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t s = 0; s < P; ++s)
      if (rows(s, p) > 0 && via(dir, s, p) == me) {
        for (int64_t r = 0; r < rows(s, p); ++r)
          index.push_back(row_in_stage1(s, p, r));
        send2[p] += rows(s, p);
      }
  for (int64_t s = 0; s < P; ++s) {
    if (rows(s, me) != recv_rows[s])
      return status::error("rack all-to-all: member " + std::to_string(s)
                           + " sends " + std::to_string(rows(s, me))
                           + " rows, " + std::to_string(recv_rows[s])
                           + " expected");
    recv2[via(dir, s, me)] += rows(s, me);
  }
  send_.resize(stream_, std::max<int64_t>(int64_t(index.size()), 1) * d);
  gather(stream_, index_, index, stage1, send_.data(), d);
  stage2_.resize(stream_, std::max<int64_t>(total(recv2), 1) * d);
  TUTTI_RETURN_IF_ERROR(coll.all_to_all_v(c, send_.data(), times(send2, d),
                                          stage2_.data(), times(recv2, d)));
  count(send2, d * int64_t(sizeof(float)));
  // From each relay in member order come its senders' rows in order; the
  // flat exchange has them by sender.
  const auto at = starts(recv_rows);
  std::vector<int64_t> regroup(static_cast<size_t>(at.back()));
  int64_t pos = 0;
  for (int64_t r = 0; r < P; ++r)
    for (int64_t s = 0; s < P; ++s)
      if (via(dir, s, me) == r)
        for (int64_t k = 0; k < recv_rows[s]; ++k)
          regroup[at[s] + k] = pos++;
  gather(stream_, index_, regroup, stage2_.data(), recv, d);
  k::wait(stream_);
  return {};
}

status rack_exchange::relayed(comm::communicator& c, staged_collectives& coll,
                              relay_direction dir, const float* send,
                              const std::vector<int64_t>& send_rows,
                              float* recv,
                              const std::vector<int64_t>& recv_rows,
                              int64_t d) {
  std::vector<int64_t> none;
  TUTTI_RETURN_IF_ERROR(share_counts(c, send_rows, none));
  return relay_rows(c, coll, dir, send, send_rows, recv, recv_rows, d);
}

status rack_exchange::relayed_back(comm::communicator& c,
                                   staged_collectives& coll, const float* send,
                                   const std::vector<int64_t>& send_rows,
                                   float* recv,
                                   const std::vector<int64_t>& recv_rows,
                                   int64_t d) {
  const int64_t P = layout_.members(), me = c.rank();
  if (c.size() != P || int64_t(send_rows.size()) != P
      || int64_t(counts_.size()) < P * P)
    return status::error("rack all-to-all: no exchange of " + std::to_string(P)
                         + " members to return rows of");
  // Checked before the counts turn, so a refused call changes nothing.
  for (int64_t p = 0; p < P; ++p)
    if (counts_[p * P + me] != send_rows[p])
      return status::error("rack all-to-all: returning "
                           + std::to_string(send_rows[p]) + " rows to member "
                           + std::to_string(p) + ", which sent "
                           + std::to_string(counts_[p * P + me]));
  for (int64_t s = 0; s < P; ++s)
    for (int64_t p = s + 1; p < P; ++p)
      std::swap(counts_[s * P + p], counts_[p * P + s]);
  return relay_rows(c, coll, relay_direction::back_to_origin, send, send_rows,
                    recv, recv_rows, d);
}

status rack_exchange::relay_rows(comm::communicator& c,
                                 staged_collectives& coll, relay_direction dir,
                                 const float* send,
                                 const std::vector<int64_t>& send_rows,
                                 float* recv,
                                 const std::vector<int64_t>& recv_rows,
                                 int64_t d) {
  const int64_t P = layout_.members(), me = c.rank();
  auto rows = [&](int64_t s, int64_t p) { return counts_[s * P + p]; };
  // Stage one: to each relay, this member's rows for the members it
  // carries them to, in member order.
  const auto from = starts(send_rows);
  std::vector<int64_t> index, send1(P, 0), recv1(P, 0);
  for (int64_t r = 0; r < P; ++r)
    for (int64_t p = 0; p < P; ++p)
      if (via(dir, me, p) == r) {
        for (int64_t k = 0; k < send_rows[p]; ++k)
          index.push_back(from[p] + k);
        send1[r] += send_rows[p];
      }
  // What arrives here as relay, and where each (sender, member) block is.
  std::vector<int64_t> block_at(P * P, 0);
  int64_t pos = 0;
  for (int64_t s = 0; s < P; ++s)
    for (int64_t p = 0; p < P; ++p)
      if (via(dir, s, p) == me) {
        block_at[s * P + p] = pos;
        pos += rows(s, p);
        recv1[s] += rows(s, p);
      }
  send_.resize(stream_, std::max<int64_t>(int64_t(index.size()), 1) * d);
  gather(stream_, index_, index, send, send_.data(), d);
  stage1_.resize(stream_, std::max<int64_t>(pos, 1) * d);
  TUTTI_RETURN_IF_ERROR(coll.all_to_all_v(c, send_.data(), times(send1, d),
                                          stage1_.data(), times(recv1, d)));
  count(send1, d * int64_t(sizeof(float)));
  return fan_out(
    c, coll, dir, stage1_.data(),
    [&](int64_t s, int64_t p, int64_t k) { return block_at[s * P + p] + k; },
    recv, recv_rows, d);
}

status rack_exchange::dispatch(comm::communicator& c, staged_collectives& coll,
                               const float* tokens, int64_t d,
                               const std::vector<int64_t>& row_token,
                               const std::vector<int64_t>& send_rows,
                               float* recv,
                               const std::vector<int64_t>& recv_rows) {
  return dispatch_rows(c, coll, tokens, d, row_token, send_rows, nullptr,
                       receive_into(recv, recv_rows), nullptr, nullptr);
}

status rack_exchange::dispatch(comm::communicator& c, staged_collectives& coll,
                               const float* tokens, int64_t d,
                               const std::vector<int64_t>& row_token,
                               const std::vector<int64_t>& send_rows,
                               std::vector<int64_t>& also,
                               const receive_at& recv_into) {
  return dispatch_rows(c, coll, tokens, d, row_token, send_rows, &also,
                       recv_into, nullptr, nullptr);
}

status rack_exchange::dispatch(comm::communicator& c, staged_collectives& coll,
                               const float* tokens, int64_t n, int64_t d,
                               int64_t k, const std::vector<int64_t>& row_slot,
                               const float* gate,
                               const std::vector<int64_t>& send_rows,
                               float* recv,
                               const std::vector<int64_t>& recv_rows,
                               relay_plan& plan) {
  return routed(c, coll, tokens, n, d, k, row_slot, gate, send_rows, nullptr,
                receive_into(recv, recv_rows), plan);
}

status rack_exchange::dispatch(comm::communicator& c, staged_collectives& coll,
                               const float* tokens, int64_t n, int64_t d,
                               int64_t k, const std::vector<int64_t>& row_slot,
                               const float* gate,
                               const std::vector<int64_t>& send_rows,
                               std::vector<int64_t>& also,
                               const receive_at& recv_into,
                               relay_plan& plan) {
  return routed(c, coll, tokens, n, d, k, row_slot, gate, send_rows, &also,
                recv_into, plan);
}

status rack_exchange::routed(comm::communicator& c, staged_collectives& coll,
                             const float* tokens, int64_t n, int64_t d,
                             int64_t k, const std::vector<int64_t>& row_slot,
                             const float* gate,
                             const std::vector<int64_t>& send_rows,
                             std::vector<int64_t>* also,
                             const receive_at& recv_into, relay_plan& plan) {
  if (k < 1 || (n * k) * 2 >= int64_t(INT32_MAX))
    return status::error("rack all-to-all: " + std::to_string(n)
                         + " tokens of top-" + std::to_string(k)
                         + " do not fit the relays' instructions");
  std::vector<int64_t> row_token(row_slot.size());
  for (size_t r = 0; r < row_slot.size(); ++r) {
    if (row_slot[r] < 0 || row_slot[r] >= n * k)
      return status::error("rack all-to-all: row slot "
                           + std::to_string(row_slot[r]) + " outside "
                           + std::to_string(n) + " x top-" + std::to_string(k));
    row_token[r] = row_slot[r] / k;
  }
  if (int64_t(send_rows.size()) != layout_.members()
      || total(send_rows) != int64_t(row_slot.size()))
    return status::error("rack all-to-all: " + std::to_string(row_slot.size())
                         + " rows, " + std::to_string(total(send_rows))
                         + " in the counts for " + std::to_string(send_rows.size())
                         + " members");
  plan.k = k;
  plan.tokens = n;
  plan.row_slot = row_slot;
  plan.send_rows = send_rows;
  plan_home(plan, layout_, c.rank());
  return dispatch_rows(c, coll, tokens, d, row_token, send_rows, also,
                       recv_into, &plan, gate);
}

status rack_exchange::dispatch_rows(comm::communicator& c,
                                    staged_collectives& coll,
                                    const float* tokens, int64_t d,
                                    const std::vector<int64_t>& row_token,
                                    const std::vector<int64_t>& send_rows,
                                    std::vector<int64_t>* also,
                                    const receive_at& recv_into,
                                    relay_plan* plan, const float* gate) {
  const int64_t P = layout_.members(), R = layout_.racks(), me = c.rank();
  const auto from = starts(send_rows);
  if (int64_t(row_token.size()) != from.back())
    return status::error("rack all-to-all: " + std::to_string(row_token.size())
                         + " row tokens for " + std::to_string(from.back())
                         + " rows");
  // The tokens this member sends to each rack, once each, ascending.
  const auto unique = plan ? plan->unique
                           : unique_by_rack(layout_, row_token, send_rows);
  // Shared: each sender's tokens per rack, and (routed) its shared rows
  // there, whose gates the instructions carry.
  const int64_t A = also ? int64_t(also->size()) : 0, X = 2 * R + A;
  std::vector<int64_t> extra(X, 0);
  for (int64_t r = 0; r < R; ++r) {
    extra[r] = int64_t(unique[r].size());
    extra[R + r] = plan ? plan->shared_rows[r] : 0;
  }
  if (also)
    std::copy(also->begin(), also->end(), extra.begin() + 2 * R);
  TUTTI_RETURN_IF_ERROR(share_counts(c, send_rows, extra));
  auto rows = [&](int64_t s, int64_t p) { return counts_[s * P + p]; };
  if (also) {
    also->resize(P * A);
    for (int64_t s = 0; s < P; ++s)
      std::copy_n(extra.begin() + s * X + 2 * R, A, also->begin() + s * A);
  }
  std::vector<int64_t> recv_rows(P);
  for (int64_t s = 0; s < P; ++s)
    recv_rows[s] = rows(s, me);
  auto landing = recv_into(recv_rows);
  if (!landing.ok())
    return landing.error();
  float* recv = landing.value();

  // Stage one: each rack's tokens to its relay for this member, with the
  // relay's instructions: for each member of the rack in order, the
  // position among those tokens of each row it wants (int32); routed, the
  // row's code (rack_plan.hpp), then the gate bits of the shared rows.
  std::vector<int64_t> index, send1(P, 0), recv1(P, 0);
  std::vector<int64_t> meta_send(P, 0), meta_recv(P, 0);
  std::vector<int32_t> meta;
  for (int64_t r = 0; r < P; ++r) {
    const int64_t rack = layout_.rack_of(r);
    if (layout_.relay(me, rack) != r)
      continue;
    const auto& u = unique[rack];
    index.insert(index.end(), u.begin(), u.end());
    send1[r] = int64_t(u.size());
    const size_t first = meta.size();
    for (int64_t p : layout_.in_rack(rack))
      for (int64_t k = from[p]; k < from[p + 1]; ++k) {
        const int64_t pos =
          std::lower_bound(u.begin(), u.end(), row_token[k]) - u.begin();
        meta.push_back(plan ? relay_code(pos, plan->row_slot[k] % plan->k,
                                         plan->k,
                                         plan->role[k] != row_role::single)
                            : static_cast<int32_t>(pos));
      }
    if (plan)
      for (int64_t p : layout_.in_rack(rack))
        for (int64_t k = from[p]; k < from[p + 1]; ++k)
          if (plan->shared[k]) {
            int32_t bits = 0;
            std::memcpy(&bits, gate + plan->row_slot[k], sizeof(bits));
            meta.push_back(bits);
          }
    meta_send[r] = int64_t(meta.size() - first);
  }
  // As relay: from each sender whose relay in this rack is this member.
  const int64_t mine = layout_.rack_of(me);
  std::vector<int64_t> meta_at(P * P, 0), gates_at(P, 0);
  int64_t meta_pos = 0;
  for (int64_t s = 0; s < P; ++s) {
    if (layout_.relay(s, mine) != me)
      continue;
    recv1[s] = extra[s * X + mine]; // everyone's, after sharing
    for (int64_t p : layout_.in_rack(mine)) {
      meta_at[s * P + p] = meta_pos;
      meta_pos += rows(s, p);
    }
    gates_at[s] = meta_pos;
    meta_pos += extra[s * X + R + mine];
    meta_recv[s] = meta_pos - meta_at[s * P + layout_.in_rack(mine)[0]];
  }
  std::vector<int32_t> meta_in(static_cast<size_t>(std::max<int64_t>(
    meta_pos, 1)));
  meta.resize(std::max<size_t>(meta.size(), 1));
  TUTTI_RETURN_IF_ERROR(c.all_to_all_v(meta.data(), meta_send, meta_in.data(),
                                       meta_recv, sizeof(int32_t)));
  count(meta_send, int64_t(sizeof(int32_t)));
  if (plan) {
    plan->counts.assign(counts_.begin(), counts_.begin() + P * P);
    plan_relay(*plan, layout_, me, meta_in, meta_at, gates_at, recv1);
  }

  send_.resize(stream_, std::max<int64_t>(int64_t(index.size()), 1) * d);
  gather(stream_, index_, index, tokens, send_.data(), d);
  const auto token_at = starts(recv1);
  stage1_.resize(stream_, std::max<int64_t>(token_at.back(), 1) * d);
  TUTTI_RETURN_IF_ERROR(coll.all_to_all_v(c, send_.data(), times(send1, d),
                                          stage1_.data(), times(recv1, d)));
  count(send1, d * int64_t(sizeof(float)));
  return fan_out(
    c, coll, relay_direction::out_of_origin, stage1_.data(),
    [&](int64_t s, int64_t p, int64_t k) {
      return token_at[s]
             + meta_in[size_t(meta_at[s * P + p] + k)]
                 / (plan ? 2 * plan->k : 1);
    },
    recv, recv_rows, d);
}

} // namespace tutti::moe
