// plan_token_affinity (planner.hpp): a plan and the racks its tokens start
// in, made for each other by alternating between the two.

#include <algorithm>
#include <numeric>

#include "tutti/placement/planner.hpp"

namespace tutti::placement {

namespace {

// token_experts' shape, checked: [token][layer][k].
struct token_table {
  const std::vector<int32_t>& picks;
  int64_t layers, top_k, tokens;

  const int32_t* of(int64_t v, int64_t l) const {
    return picks.data() + (v * layers + l) * top_k;
  }
};

// Each token's rack: the one holding most of its picks under `plan`, racks
// taking tokens in proportion to their ranks, the tokens whose best rack
// leads its second by most choosing first (ties: the lower token, the
// lower rack). Returns [token] -> rack and sets `in_rack` to the share of
// picks in the token's rack.
std::vector<int64_t> racks_of_tokens(const placement_plan& plan,
                                     const topology& topo,
                                     const token_table& t, double& in_rack) {
  const int64_t R = topo.racks(), E = plan.experts;
  const int64_t S = plan.slots_per_rank();
  const auto slot_of = plan.slot_of();
  std::vector<double> votes(t.tokens * R, 0.0);
  for (int64_t v = 0; v < t.tokens; ++v)
    for (int64_t l = 0; l < t.layers; ++l)
      for (int64_t k = 0; k < t.top_k; ++k) {
        const int32_t e = t.of(v, l)[k];
        votes[v * R + topo.rack_of_rank(slot_of[l * E + e] / S)] += 1;
      }
  std::vector<double> room(R, 0.0);
  for (int64_t r = 0; r < topo.ranks; ++r)
    room[topo.rack_of_rank(r)] += double(t.tokens) / double(topo.ranks);
  auto lead = [&](int64_t v) {
    std::vector<double> s(votes.begin() + v * R, votes.begin() + (v + 1) * R);
    std::sort(s.rbegin(), s.rend());
    return R > 1 ? s[0] - s[1] : 0.0;
  };
  std::vector<int64_t> order(t.tokens);
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> leads(t.tokens);
  for (int64_t v = 0; v < t.tokens; ++v)
    leads[v] = lead(v);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return leads[a] > leads[b]; });
  std::vector<int64_t> rack(t.tokens, 0);
  double hits = 0;
  for (int64_t v : order) {
    int64_t best = -1;
    for (int64_t r = 0; r < R; ++r)
      if (room[r] >= 1.0 - 1e-9
          && (best < 0 || votes[v * R + r] > votes[v * R + best]))
        best = r;
    if (best < 0) // rounding left every rack full: the roomiest
      best = std::max_element(room.begin(), room.end()) - room.begin();
    rack[v] = best;
    room[best] -= 1.0;
    hits += votes[v * R + best];
  }
  in_rack = hits / double(t.tokens * t.layers * t.top_k);
  return rack;
}

} // namespace

double token_picks_in_rack(const placement_plan& plan, const topology& topo,
                           const std::vector<int32_t>& token_experts,
                           int64_t top_k) {
  const token_table t{token_experts, plan.layers, top_k,
                      int64_t(token_experts.size()) / (plan.layers * top_k)};
  double share = 0;
  racks_of_tokens(plan, topo, t, share);
  return share;
}

expected<placement_plan> plan_token_affinity(
  const routing_stats& st, const topology& topo,
  const std::vector<int32_t>& token_experts, int64_t top_k,
  planner_options options) {
  const int64_t L = st.layers, E = st.experts, R = topo.racks();
  if (top_k < 1 || token_experts.empty()
      || int64_t(token_experts.size()) % (L * top_k) != 0)
    return status::error("placement: token experts for another shape");
  for (int32_t e : token_experts)
    if (e < 0 || e >= E)
      return status::error("placement: a token's expert " + std::to_string(e)
                           + " is not one of " + std::to_string(E));
  const token_table t{token_experts, L, top_k,
                      int64_t(token_experts.size()) / (L * top_k)};
  options.chain_layers = true;
  options.rack_affinity.clear();
  auto plan = plan_rack_aware(st, topo, options);
  if (!plan.ok() || R < 2)
    return plan;
  double best_share = 0;
  auto racks = racks_of_tokens(plan.value(), topo, t, best_share);
  placement_plan best = plan.value();
  // A pick of a token is worth one token's share of the layer's load, so
  // the affinity weighs like the co-activations it is added to.
  std::vector<double> per_pick(L, 0.0);
  for (int64_t l = 0; l < L; ++l) {
    double load = 0;
    for (int64_t e = 0; e < E; ++e)
      load += double(st.load_at(l, e));
    per_pick[l] = load / double(t.tokens * top_k);
  }
  for (int round = 0; round < 12; ++round) {
    options.rack_affinity.assign(L * E * R, 0.0);
    for (int64_t v = 0; v < t.tokens; ++v)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t k = 0; k < top_k; ++k)
          options.rack_affinity[(l * E + t.of(v, l)[k]) * R + racks[v]] +=
            per_pick[l];
    auto next = plan_rack_aware(st, topo, options);
    if (!next.ok())
      return next;
    double share = 0;
    racks = racks_of_tokens(next.value(), topo, t, share);
    if (share > best_share + 1e-12) {
      best_share = share;
      best = std::move(next.value());
    }
  }
  return best;
}

} // namespace tutti::placement
