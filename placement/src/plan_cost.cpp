#include <algorithm>

#include "tutti/placement/planner.hpp"

namespace tutti::placement {

namespace {

// Expected crossings per token of one layer for a grouping of ranks
// (group_of_rank), flat and dedup.
void crossings(const placement_plan& plan, const routing_stats& st,
               const topology& topo, int64_t l,
               const std::vector<int64_t>& group_of_rank, int64_t groups,
               double& flat, double& dedup) {
  const int64_t E = st.experts, S = plan.slots_per_rank(), P = topo.ranks;
  std::vector<double> share(groups, 0.0), load(groups, 0.0), pairs(groups, 0.0),
    most(groups, 0.0);
  for (int64_t r = 0; r < P; ++r)
    share[group_of_rank[r]] += 1.0 / double(P);
  std::vector<int64_t> group_of_expert(E);
  for (int64_t s = 0; s < E; ++s)
    group_of_expert[plan.expert_in(l, s)] = group_of_rank[s / S];
  for (int64_t e = 0; e < E; ++e) {
    const auto g = group_of_expert[e];
    const double w = double(st.load_at(l, e));
    load[g] += w;
    most[g] = std::max(most[g], w);
    for (int64_t f = e + 1; f < E; ++f)
      if (group_of_expert[f] == g)
        pairs[g] += double(st.coactivation_at(l, e, f));
  }
  const double tokens = std::max<double>(double(st.tokens), 1.0);
  flat = dedup = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const double outside = 1.0 - share[g];
    const double hits = std::clamp(load[g] - pairs[g], most[g], tokens);
    flat += outside * load[g] / tokens;
    dedup += outside * hits / tokens;
  }
}

} // namespace

plan_cost evaluate(const placement_plan& plan, const routing_stats& st,
                   const topology& topo, double bytes_per_crossing) {
  plan_cost c;
  std::vector<int64_t> rack_of_rank(topo.ranks);
  for (int64_t r = 0; r < topo.ranks; ++r)
    rack_of_rank[r] = topo.rack_of_rank(r);
  const int64_t S = plan.slots_per_rank();
  for (int64_t l = 0; l < st.layers; ++l) {
    double flat = 0, dedup = 0;
    crossings(plan, st, topo, l, rack_of_rank, topo.racks(), flat, dedup);
    c.cross_rack_flat += flat * bytes_per_crossing;
    c.cross_rack_dedup += dedup * bytes_per_crossing;
    crossings(plan, st, topo, l, topo.node_of_rank, topo.nodes(), flat, dedup);
    c.cross_node_flat += flat * bytes_per_crossing;
    c.cross_node_dedup += dedup * bytes_per_crossing;
    std::vector<double> per_rank(topo.ranks, 0.0);
    double total = 0;
    for (int64_t s = 0; s < st.experts; ++s) {
      per_rank[s / S] += double(st.load_at(l, plan.expert_in(l, s)));
      total += double(st.load_at(l, plan.expert_in(l, s)));
    }
    if (total > 0)
      c.imbalance = std::max(c.imbalance,
                             *std::max_element(per_rank.begin(), per_rank.end())
                               * double(topo.ranks) / total);
  }
  return c;
}

} // namespace tutti::placement
