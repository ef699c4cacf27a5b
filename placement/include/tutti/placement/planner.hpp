#pragma once
// Placement planners and the traffic model they are judged by.
//
// Traffic: a token starts on a rank of the EP group chosen uniformly (data
// parallelism), and at each MoE layer goes to the ranks of its top-k
// experts and back (forward dispatch and combine, and both again in the
// backward: four crossings of hidden_size floats). A flat all-to-all sends
// it once per expert; a rack-aware one (dedup) once per remote rack or node
// that holds any of its experts. Expected per-token crossings come from the
// routing statistics: load for the flat one, load minus co-activated pairs
// (inclusion-exclusion, exact for top-2) for the dedup one. Training's rack
// relays (model/rack_plan.hpp) do exactly that across racks for top-2; for
// top-k > 2 their combine and input gradients come back once per rack only
// for a token's leading top-k slots there. No engine dedups per node.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/placement/plan.hpp"
#include "tutti/placement/routing_stats.hpp"
#include "tutti/placement/topology.hpp"

namespace tutti::placement {

struct plan_cost {
  // Expected bytes per token (one training step, all layers).
  double cross_rack_flat = 0, cross_node_flat = 0;
  double cross_rack_dedup = 0, cross_node_dedup = 0;
  double imbalance = 0; // worst layer's max/mean tokens per rank
};

// bytes_per_crossing: what one token's hidden vector costs on a link, times
// the crossings per step (training: 4 * hidden_size * sizeof(float)).
plan_cost evaluate(const placement_plan& plan, const routing_stats& stats,
                   const topology& topo, double bytes_per_crossing);

// DeepSeek's EPLB without replicas (training has none): contiguous groups
// of experts (one per node) packed to nodes by load, then each node's
// experts packed to its ranks by load. Blind to racks and co-activation.
placement_plan plan_eplb(const routing_stats& stats, const topology& topo);

struct planner_options {
  double max_imbalance = 1.1; // per-rank tokens, max/mean, per layer
  // Chain the layers: an expert of layer l also goes where the experts of
  // layer l-1 that pass it tokens are (transitions), so a token that
  // starts in the rack of its first experts (data.rack_affinity) tends to
  // stay there through the layers.
  bool chain_layers = false;
  // [layer][expert][rack] (or empty): how many of the expert's rows come
  // from tokens expected to start in each rack (plan_token_affinity).
  // Counted at the rack level like co-activations with the experts there.
  std::vector<double> rack_affinity = {};
};

// tutti's plan: per layer, experts to racks, then within each rack to
// nodes, then within each node to ranks, each level a partition that keeps
// co-activated experts together (fewest expected crossings of the dedup
// all-to-all, weighted by how much of the group the token's origin is
// outside) under the load bound, by greedy seeding and pair swaps. Slots
// per rank are the memory bound (experts / ranks each).
expected<placement_plan> plan_rack_aware(const routing_stats& stats,
                                         const topology& topo,
                                         planner_options options = {});

// For data.rack_affinity, where each window of a step is dealt to the rack
// holding most of its tokens' experts: token_experts ([token][layer][k],
// the model's picks for each token on its own, token_experts.hpp)
// predicts those experts, so the plan and the tokens' racks are made for
// each other. Starting from tutti's plan with chained layers, it
// alternates: each token to the rack that holds most of its picks over
// all layers (racks filled in proportion to their ranks, the strongest
// preferences first, as the deal does), then every layer planned again
// with each expert drawn to the racks of the tokens that pick it
// (planner_options::rack_affinity). Keeps the plan of the round with the
// most picks in their token's rack; the load bound holds throughout.
expected<placement_plan> plan_token_affinity(
  const routing_stats& stats, const topology& topo,
  const std::vector<int32_t>& token_experts, int64_t top_k,
  planner_options options = {});

// The share of all tokens' picks (token_experts) that fall in the rack each
// token is dealt to under `plan`, racks filled as plan_token_affinity does.
double token_picks_in_rack(const placement_plan& plan, const topology& topo,
                           const std::vector<int32_t>& token_experts,
                           int64_t top_k);

} // namespace tutti::placement
