#pragma once
// Where a serving replica's experts live: for every layer, which rank's
// expert shard computes each expert. Dispatch sends a (token, slot) row to
// the rank holding its expert and the combine brings it back to the slot it
// left from, so any layout gives the tokens of any other to the bit: a
// layout changes traffic, never numerics.
//
// Per layer, `order` lists the experts rank 0 holds, then rank 1's, ...;
// rank p holds positions [begin(l, p), end(l, p)). Ranks may hold different
// numbers of experts (an offload rank holds the rarely used ones, however
// many), and a rank may hold none of a layer's.

#include <cstdint>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/placement/plan.hpp"

namespace tutti::serve {

struct expert_layout {
  int64_t layers = 0, experts = 0, ranks = 0;
  std::vector<int32_t> order;   // [layer][position] -> expert
  std::vector<int64_t> bounds;  // [layer][rank 0..ranks] -> first position
  std::vector<int32_t> position; // [layer][expert] -> position (inverse)
  // Offload (offload_layout.hpp): the rank holding the rarely used experts
  // (-1: none) and which experts of each layer it holds, [layer][expert].
  int64_t offload_rank = -1;
  std::vector<char> offloaded;

  int64_t begin(int64_t l, int64_t rank) const {
    return bounds[l * (ranks + 1) + rank];
  }
  int64_t end(int64_t l, int64_t rank) const { return begin(l, rank + 1); }
  int32_t expert_at(int64_t l, int64_t pos) const {
    return order[l * experts + pos];
  }
  int32_t position_of(int64_t l, int64_t expert) const {
    return position[l * experts + expert];
  }
  int64_t rank_of(int64_t l, int64_t expert) const;
  bool is_offloaded(int64_t l, int64_t expert) const {
    return !offloaded.empty() && offloaded[l * experts + expert];
  }
  bool is_contiguous() const;

  // Expert i of every layer on rank i / (experts / ranks); the experts
  // must divide over the ranks.
  static expected<expert_layout> contiguous(int64_t layers, int64_t experts,
                                            int64_t ranks);
  // Contiguous blocks as even as ranks allow: expert e on rank
  // e * ranks / experts (the base offload starts from without a plan).
  static expert_layout blocks(int64_t layers, int64_t experts, int64_t ranks);
  // A training placement plan (moe_config.placement's format): rank p
  // holds slots [p*S, (p+1)*S) of each layer.
  static expert_layout from_plan(const placement::placement_plan& plan);
  // Per layer, which rank holds each expert ([layer][expert] -> rank);
  // within a rank, experts keep their id order.
  static expected<expert_layout> from_owners(int64_t layers, int64_t experts,
                                             int64_t ranks,
                                             const std::vector<int32_t>& owner);
  // From order and bounds as laid out above (a layout sent between
  // daemons); checked.
  static expected<expert_layout> from_order(int64_t layers, int64_t experts,
                                            int64_t ranks,
                                            std::vector<int32_t> order,
                                            std::vector<int64_t> bounds);
  // Every layer a permutation, bounds rising from 0 to experts; position
  // the inverse of order.
  status check() const;
};

} // namespace tutti::serve
