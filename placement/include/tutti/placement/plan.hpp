#pragma once
// A placement: for every MoE layer, which logical expert sits in each
// physical slot of the expert-parallel group. Rank p holds slots
// [p*S, (p+1)*S), S = experts / ranks; the contiguous layout puts expert i
// in slot i. A plan is a JSON file the config names
// (moe_config.placement):
//   {"format": "tutti-placement-1", "layers": L, "experts": E, "ranks": P,
//    "expert_at": [[expert in slot 0, slot 1, ...] per layer],
//    "token_experts": [[[expert, ...] per layer] per vocabulary token]}
// token_experts (optional): the top-k experts the model picks for each
// token on its own at each layer (`tutti placement plan --method affinity
// --model`), which data.rack_affinity deals each step's windows by.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::placement {

struct placement_plan {
  int64_t layers = 0, experts = 0, ranks = 0;
  std::vector<int32_t> expert_at; // [layer][slot] -> logical expert
  // [token][layer][j], token_top_k per layer; empty when the plan has none.
  std::vector<int32_t> token_experts;
  int64_t token_top_k = 0;

  int64_t slots_per_rank() const { return experts / ranks; }
  int32_t expert_in(int64_t l, int64_t slot) const {
    return expert_at[l * experts + slot];
  }
  // [layer][logical expert] -> slot: the inverse of expert_at.
  std::vector<int32_t> slot_of() const;
  // The expert -> rank map: the EP member (0..ranks-1) whose shard holds
  // `expert` of `layer`, in every EP group alike. Dispatch sends a token's
  // row for that expert there; O(experts) per call (use slot_of() in loops).
  int64_t rank_of(int64_t layer, int32_t expert) const;
  // The experts EP member `rank` holds, [layer][local slot 0..S-1].
  std::vector<int32_t> experts_of_rank(int64_t rank) const;
  bool is_contiguous() const;

  static placement_plan contiguous(int64_t layers, int64_t experts,
                                   int64_t ranks);
  int64_t token_vocab() const {
    return token_top_k > 0
             ? int64_t(token_experts.size()) / (token_top_k * layers)
             : 0;
  }
  // Every layer a permutation of 0..E-1 and E divisible by ranks; token
  // experts in range.
  status check() const;

  std::string to_json() const;
  static expected<placement_plan> from_json(const std::string& text);
  status write(const std::filesystem::path& file) const;
  static expected<placement_plan> read(const std::filesystem::path& file);
};

} // namespace tutti::placement
