// The exchanges after a routed dispatch through the rack relays
// (rack_exchange.hpp, rack_plan.hpp): the combine, summed at the relay for
// a token's leading run of slots in a remote rack, and the backward pass's
// output-gradient dispatch, once per token and rack. The relays run the
// home's own kernels on the rows they hold (unpermute_combine,
// permute_rows_backward, unpermute_combine_backward), numbering a home's
// tokens and slots so that each sum runs in the order the home's would.

#include <string>
#include <tuple>

#include "tutti/moe/rack_rows.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/moe/rack_exchange.hpp"

namespace tutti::moe {

namespace k = tutti::kernels;
using namespace rack_rows;

status rack_exchange::combine_to_relays(
  comm::communicator& c, staged_collectives& coll, const relay_plan& plan,
  const float* send, kernels::tensor<float>& into, int64_t d) {
  const int64_t P = layout_.members(), me = c.rank();
  const int64_t mine = layout_.rack_of(me);
  // As owner: the rows for each home, packed by home, to the home's relay
  // in this rack.
  std::vector<int64_t> send_rows(P);
  for (int64_t h = 0; h < P; ++h)
    send_rows[h] = plan.counts[h * P + me];
  const auto from = starts(send_rows);
  std::vector<int64_t> index, send1(P, 0), recv1(P, 0);
  for (int64_t r = 0; r < P; ++r)
    for (int64_t h = 0; h < P; ++h)
      if (layout_.relay(h, mine) == r) {
        for (int64_t i = from[h]; i < from[h + 1]; ++i)
          index.push_back(i);
        send1[r] += send_rows[h];
      }
  // As relay: each owner of this rack's rows for the homes it serves, in
  // relay-row order.
  for (int64_t o : layout_.in_rack(mine))
    for (int64_t h = 0; h < P; ++h)
      if (layout_.relay(h, mine) == me)
        recv1[o] += plan.counts[h * P + o];
  if (total(recv1) != plan.relay_rows)
    return status::error("rack combine: " + std::to_string(total(recv1))
                         + " rows for the relay, the plan has "
                         + std::to_string(plan.relay_rows));
  into.resize(stream_, std::max<int64_t>(plan.relay_rows + plan.groups, 1) * d);
  send_.resize(stream_, std::max<int64_t>(int64_t(index.size()), 1) * d);
  gather(stream_, index_, index, send, send_.data(), d);
  TUTTI_RETURN_IF_ERROR(coll.all_to_all_v(c, send_.data(), times(send1, d),
                                          into.data(), times(recv1, d)));
  count(send1, d * int64_t(sizeof(float)));
  return {};
}

status rack_exchange::combine_to_homes(comm::communicator& c,
                                       staged_collectives& coll,
                                       const relay_plan& plan,
                                       const float* pool, const float* slots,
                                       float* recv, float* dgate, int64_t d) {
  const int64_t P = layout_.members();
  const bool with_slots = slots != nullptr;
  std::vector<int64_t> send2(P), recv2(P);
  for (int64_t p = 0; p < P; ++p) {
    send2[p] = plan.to_home_rows[p] * d
               + (with_slots ? plan.to_home_slots[p] : 0);
    recv2[p] = plan.from_relay_rows[p] * d
               + (with_slots ? plan.from_relay_slots[p] : 0);
  }
  // As relay: to each home its rows, then its rows' gate gradients.
  send_.resize(stream_, std::max<int64_t>(total(send2), 1));
  index_.upload(stream_, plan.out_index);
  index2_.upload(stream_, plan.slot_index);
  int64_t at = 0, row = 0, slot = 0;
  for (int64_t h = 0; h < P; ++h) {
    if (const int64_t n = plan.to_home_rows[h]; n > 0)
      k::gather_rows(stream_, pool, index_.data() + row, send_.data() + at, n,
                     d);
    at += plan.to_home_rows[h] * d;
    row += plan.to_home_rows[h];
    if (!with_slots)
      continue;
    if (const int64_t n = plan.to_home_slots[h]; n > 0)
      k::gather_rows(stream_, slots, index2_.data() + slot, send_.data() + at,
                     n, int64_t{1});
    at += plan.to_home_slots[h];
    slot += plan.to_home_slots[h];
  }
  stage2_.resize(stream_, std::max<int64_t>(total(recv2), 1));
  TUTTI_RETURN_IF_ERROR(
    coll.all_to_all_v(c, send_.data(), send2, stage2_.data(), recv2));
  count(send2, int64_t(sizeof(float)));
  // As home: zeros (the followers), then what each relay sent, in place.
  k::fill_zero(stream_, recv, total(plan.send_rows) * d);
  index_.upload(stream_, plan.land_row);
  index2_.upload(stream_, plan.land_slot);
  at = row = slot = 0;
  for (int64_t v = 0; v < P; ++v) {
    if (const int64_t n = plan.from_relay_rows[v]; n > 0)
      k::scatter_rows(stream_, stage2_.data() + at, index_.data() + row, recv,
                      n, d);
    at += plan.from_relay_rows[v] * d;
    row += plan.from_relay_rows[v];
    if (!with_slots)
      continue;
    if (const int64_t n = plan.from_relay_slots[v]; n > 0)
      k::scatter_rows(stream_, stage2_.data() + at, index2_.data() + slot,
                      dgate, n, int64_t{1});
    at += plan.from_relay_slots[v];
    slot += plan.from_relay_slots[v];
  }
  k::wait(stream_);
  return {};
}

status rack_exchange::combine(
  comm::communicator& c, staged_collectives& coll, relay_plan& plan,
  combine_kind kind, const float* send, const std::vector<int64_t>& send_rows,
  float* recv, const std::vector<int64_t>& recv_rows, float* dgate, int64_t d) {
  const int64_t P = layout_.members(), me = c.rank();
  if (c.size() != P || int64_t(plan.counts.size()) != P * P
      || int64_t(send_rows.size()) != P || int64_t(recv_rows.size()) != P)
    return status::error("rack combine: no routed dispatch of this group "
                         "to combine");
  for (int64_t p = 0; p < P; ++p)
    if (send_rows[p] != plan.counts[p * P + me]
        || recv_rows[p] != plan.counts[me * P + p])
      return status::error("rack combine: member " + std::to_string(p)
                           + "'s rows differ from the dispatch's");
  const bool grads = kind == combine_kind::input_gradients;
  const int64_t N = plan.relay_rows, G = plan.groups, K = plan.k;
  const int64_t rows = int64_t(plan.group_rows.size());
  if (grads && int64_t(plan.dgate.size()) < rows)
    return status::error("rack combine: input gradients before the output "
                         "gradient's dispatch");
  TUTTI_RETURN_IF_ERROR(combine_to_relays(c, coll, plan, send, stage1_, d));
  // As relay: each group's sum after the relay rows, by the home's kernel
  // on the group's rows (slots group * k + rank, gates as the home's). The
  // outputs of the groups' rows stay for the backward pass.
  float* sums = stage1_.data() + N * d;
  if (G > 0) {
    auto& in = grads ? group_in_ : plan.kept;
    in.resize(stream_, rows * d);
    gather(stream_, index_, plan.group_rows, stage1_.data(), in.data(), d);
    slots_.upload(stream_, plan.group_slot);
    if (grads) {
      k::fill_zero(stream_, sums, G * d);
      k::permute_rows_backward(stream_, in.data(), slots_.data(), sums, rows, K,
                               d);
    } else {
      vgate_.upload(stream_, plan.group_gate);
      k::unpermute_combine(stream_, in.data(), slots_.data(), vgate_.data(),
                           sums, rows, G, K, d);
    }
  } else if (!grads) {
    plan.kept.resize(stream_, 0);
  }
  return combine_to_homes(c, coll, plan, stage1_.data(),
                          grads ? plan.dgate.data() : nullptr, recv, dgate, d);
}

status rack_exchange::dispatch_gradient(comm::communicator& c,
                                        staged_collectives& coll,
                                        relay_plan& plan, const float* dout,
                                        const float* drows, float* recv,
                                        const std::vector<int64_t>& recv_rows,
                                        int64_t d) {
  const int64_t P = layout_.members(), R = layout_.racks(), me = c.rank();
  const int64_t mine = layout_.rack_of(me), K = plan.k;
  const int64_t N = plan.relay_rows;
  const int64_t grouped = int64_t(plan.group_rows.size());
  const int64_t others = int64_t(plan.other_rows.size());
  if (c.size() != P || int64_t(plan.counts.size()) != P * P
      || int64_t(plan.unique.size()) != R)
    return status::error("rack gradient dispatch: no routed dispatch of "
                         "this group");
  if (int64_t(plan.kept.size()) < grouped * d)
    return status::error("rack gradient dispatch: the layer's combine kept "
                         "no outputs");
  // Stage one, as the dispatch's: each rack's tokens once to its relay, the
  // output gradient of a token shared there, else its one row's gradient.
  std::vector<int64_t> from_dout, at_dout, from_rows, at_rows;
  std::vector<int64_t> send1(P, 0), recv1(P, 0);
  int64_t at = 0;
  for (int64_t r = 0; r < P; ++r) {
    const int64_t rack = layout_.rack_of(r);
    if (layout_.relay(me, rack) != r)
      continue;
    const auto& u = plan.unique[rack];
    for (size_t j = 0; j < u.size(); ++j, ++at) {
      const int64_t alone = plan.alone_row[rack][j];
      (alone < 0 ? from_dout : from_rows).push_back(alone < 0 ? u[j] : alone);
      (alone < 0 ? at_dout : at_rows).push_back(at);
    }
    send1[r] = int64_t(u.size());
  }
  for (int64_t h = 0; h < P; ++h)
    if (layout_.relay(h, mine) == me)
      recv1[h] = plan.tokens_from[h];
  send_.resize(stream_, std::max<int64_t>(at, 1) * d);
  for (auto [src, from, to] : {std::tuple{dout, &from_dout, &at_dout},
                               std::tuple{drows, &from_rows, &at_rows}}) {
    if (from->empty())
      continue;
    group_in_.resize(stream_, int64_t(from->size()) * d);
    gather(stream_, index_, *from, src, group_in_.data(), d);
    index_.upload(stream_, *to);
    k::scatter_rows(stream_, group_in_.data(), index_.data(), send_.data(),
                    int64_t(to->size()), d);
  }
  stage1_.resize(stream_, std::max<int64_t>(plan.tokens_in, 1) * d);
  TUTTI_RETURN_IF_ERROR(coll.all_to_all_v(c, send_.data(), times(send1, d),
                                          stage1_.data(), times(recv1, d)));
  count(send1, d * int64_t(sizeof(float)));
  // As relay: each row's gradient gate * dout (gate 1 on a row's own
  // gradient), by the home's kernel on this member's rows: the others'
  // against zeros, then the groups' against their kept outputs, whose gate
  // gradients dot(dout, output) go home with the input gradients.
  grads_.resize(stream_, std::max<int64_t>(N, 1) * d);
  vdgate_.resize(stream_, std::max<int64_t>(plan.tokens_in * K, 1));
  vgate_.upload(stream_, plan.vgate);
  if (others > 0) {
    group_in_.zeros(stream_, others * d);
    slots_.upload(stream_, plan.other_vslot);
    k::unpermute_combine_backward(stream_, stage1_.data(), group_in_.data(),
                                  slots_.data(), vgate_.data(),
                                  grads_.data() + grouped * d, vdgate_.data(),
                                  others, plan.tokens_in, K, d);
  }
  plan.dgate.resize(stream_, std::max<int64_t>(grouped, 1));
  if (grouped > 0) {
    slots_.upload(stream_, plan.group_vslot);
    k::unpermute_combine_backward(
      stream_, stage1_.data(), plan.kept.data(), slots_.data(), vgate_.data(),
      grads_.data(), vdgate_.data(), grouped, plan.tokens_in, K, d);
    const std::vector<int64_t> slot_at(plan.group_vslot.begin(),
                                       plan.group_vslot.end());
    gather(stream_, index_, slot_at, vdgate_.data(), plan.dgate.data(), 1);
  }
  // Stage two: the rows' gradients to their owners, as the dispatch.
  counts_ = plan.counts;
  return fan_out(
    c, coll, relay_direction::out_of_origin, grads_.data(),
    [&](int64_t h, int64_t o, int64_t i) {
      return plan.gradient_at[plan.block_at[o * P + h] + i];
    },
    recv, recv_rows, d);
}

} // namespace tutti::moe
