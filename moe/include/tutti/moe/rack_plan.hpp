#pragma once
// What a routed dispatch through the rack relays (rack_exchange.hpp) leaves
// for the later exchanges of the same layer: the combine, and in training
// the two backward ones. Built by rack_exchange::dispatch; kept with the
// layer's activations until its backward pass.
//
// Groups. A token's outputs are summed in slot order (the router's
// ranking) from zero: out = ((0 + g_a y_a) + g_b y_b) + ..., over the
// slots that have a row (kernels' unpermute_combine; the input gradients
// likewise without gates, permute_rows_backward). When the leading run of
// those slots, two or more, lives in one remote rack, its relay can
// compute that prefix itself, with the same kernel, and send one row back;
// the home then adds it where the run's first slot was (gate 1, and the
// run's other rows as zeros with gate 0), and every later slot as before:
// the same bits as the flat exchange. Such a run is a group: its first row
// the lead, the others followers. Other rows (a run not at the front, or
// the home's own rack) come back one by one. For top-2 every token whose
// two experts share a remote rack is a group.
//
// Shared rows. The output gradient of a token with two or more rows in a
// rack (its shared rows there) crosses to the rack once; the relay
// computes each row's gradient gate * dout, and for a group's rows also
// the gate gradients dot(dout, output) from the outputs it kept. A token's
// only row in a rack comes back as it was, so the home computes its
// gradients as the flat path does and sends that row's gradient (gate 1 at
// the relay). Gates travel with the dispatch for the shared rows only, and
// gate gradients come back for the groups' rows only.
//
// Rows. The home's rows are in dispatch order (packed by owner). A relay
// numbers the rows through it ("relay rows") as the combine's first stage
// brings them: by owner (members of its rack, ascending), then home, then
// the home's order.

#include <cstdint>
#include <vector>

#include "tutti/kernels/tensor.hpp"

namespace tutti::moe {

class rack_layout;

enum class row_role : int8_t { single = 0, lead = 1, follower = 2 };

struct relay_plan {
  int64_t k = 0;               // slots per token (top-k)
  int64_t tokens = 0;          // the home's tokens (its gates are [tokens * k])
  std::vector<int64_t> counts; // [home * P + owner] rows of the dispatch

  // -- home side: this member's rows.
  std::vector<int64_t> send_rows;           // per owner
  std::vector<int64_t> row_slot;            // per row: token * k + rank
  std::vector<row_role> role;               // per row
  std::vector<char> shared;                 // per row
  std::vector<std::vector<int64_t>> unique; // per rack: tokens, ascending
  // Per rack, per unique token: its only row there, or -1 when shared.
  std::vector<std::vector<int64_t>> alone_row;
  std::vector<int64_t> shared_rows; // per rack
  // What each relay sends back, by relay (member order): rows (singles,
  // then the groups' leads) and the dispatch rows they land on; for input
  // gradients also the gate gradients of the groups' rows, and their slots.
  std::vector<int64_t> from_relay_rows, from_relay_slots; // per member
  std::vector<int64_t> land_row, land_slot;

  // -- relay side: the relay rows.
  std::vector<int64_t> tokens_from; // per home: its tokens through here
  int64_t tokens_in = 0;            // all homes, in home order
  std::vector<int64_t> block_at;    // [owner * P + home]: its first relay row
  std::vector<float> vgate; // [tokens_in * k]: shared rows' gates, else 1
  // The groups' rows (relay rows, and their slots among all tokens through
  // here and within their group), and the other rows.
  std::vector<int64_t> group_rows, other_rows;
  std::vector<int32_t> group_vslot, group_slot, other_vslot;
  std::vector<float> group_gate; // [groups * k]
  int64_t groups = 0;
  std::vector<int64_t> gradient_at; // per relay row: its row gradient's place
  // Stage two, to each home in member order: rows of [relay rows; group
  // sums] (its singles, then its groups), and for input gradients the gate
  // gradients of its groups' rows (places in group_rows).
  std::vector<int64_t> to_home_rows, to_home_slots; // per member
  std::vector<int64_t> out_index, slot_index;
  int64_t relay_rows = 0;

  // Kept from the combine for the backward pass: the experts' outputs of
  // the groups' rows, and the gate gradients the output gradient's
  // dispatch computed from them (both in group_rows order).
  kernels::tensor<float> kept, dgate;
};

// The tokens of rows packed by member (send_rows) that go to each rack,
// once each, ascending.
std::vector<std::vector<int64_t>> unique_by_rack(
  const rack_layout& layout, const std::vector<int64_t>& row_token,
  const std::vector<int64_t>& send_rows);

// The home side, from k, tokens, send_rows and row_slot: roles, the tokens
// each rack gets, and where the relays' rows land.
void plan_home(relay_plan& plan, const rack_layout& layout, int64_t me);

// One instruction word of the dispatch per row (pos: the token's index
// among those sent to the rack), and back.
int32_t relay_code(int64_t pos, int64_t rank, int64_t k, bool grouped);
void relay_decode(int32_t code, int64_t k, int64_t& pos, int64_t& rank,
                  bool& grouped);

// The relay side, from counts and the instructions received: from each
// home, the codes of its rows (meta[meta_at[home * P + owner] + i]), then
// the gate bits of its shared rows in the same order (from gates_at[home]);
// tokens_from[home]: the tokens it sent here.
void plan_relay(relay_plan& plan, const rack_layout& layout, int64_t me,
                const std::vector<int32_t>& meta,
                const std::vector<int64_t>& meta_at,
                const std::vector<int64_t>& gates_at,
                const std::vector<int64_t>& tokens_from);

// The gates the home's combine weighs its rows with: 1 on a lead (its row
// is the group's sum), 0 on a follower (a zero row), the router's elsewhere.
void combine_gates(const relay_plan& plan, std::vector<float>& gate);

} // namespace tutti::moe
