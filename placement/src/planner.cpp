#include <algorithm>
#include <numeric>

#include "tutti/placement/planner.hpp"

namespace tutti::placement {

namespace {

struct group_spec {
  int64_t capacity = 0; // expert slots
  double target = 0;    // its fair share of the layer's load
  double outside = 0;   // probability a token starts outside the group
};

// One layer's statistics as doubles.
struct layer_stats {
  const routing_stats& st;
  int64_t l;
  double load(int64_t e) const { return double(st.load_at(l, e)); }
  double pair(int64_t e, int64_t f) const {
    return double(st.coactivation_at(l, e, f));
  }
};

// Splits `items` (expert ids) over `groups`, filling each to capacity:
// fewest expected dedup crossings, sum_g outside_g * (load_g - pairs_g),
// with load_g <= bound * target_g where it can. Greedy by load, then pair
// swaps that lower the bound's violation or, at equal violation, the cost.
// `fixed` ([item][group], or empty): affinity of an item to a group that
// does not depend on this partition (its tokens' experts of the layer
// before, placed there), counted like co-activations.
std::vector<int64_t> partition(const std::vector<int32_t>& items,
                               const std::vector<group_spec>& groups,
                               const layer_stats& ls, double bound,
                               const std::vector<double>& fixed = {}) {
  const auto n = int64_t(items.size());
  const auto G = int64_t(groups.size());
  std::vector<int64_t> group_of(n, -1), used(G, 0);
  std::vector<double> load(G, 0.0);
  // affinity[i * G + g]: co-activations of item i with the items in g.
  std::vector<double> affinity = fixed;
  affinity.resize(n * G, 0.0);
  auto over = [&](int64_t g, double l) {
    return groups[g].target > 0 ? std::max(0.0, l / groups[g].target - bound)
                                : 0.0;
  };
  auto place = [&](int64_t i, int64_t g, int sign) {
    group_of[i] = sign > 0 ? g : -1;
    used[g] += sign;
    load[g] += sign * ls.load(items[i]);
    for (int64_t j = 0; j < n; ++j)
      affinity[j * G + g] += sign * ls.pair(items[j], items[i]);
  };

  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return ls.load(items[a]) > ls.load(items[b]);
  });
  for (int64_t i : order) {
    int64_t best = -1;
    double best_over = 0, best_cost = 0, best_fill = 0;
    for (int64_t g = 0; g < G; ++g) {
      if (used[g] >= groups[g].capacity)
        continue;
      const double w = ls.load(items[i]);
      const double o = over(g, load[g] + w);
      const double cost = groups[g].outside * (w - affinity[i * G + g]);
      const double fill = groups[g].target > 0 ? load[g] / groups[g].target
                                               : double(used[g]);
      if (best < 0 || o < best_over
          || (o == best_over
              && (cost < best_cost || (cost == best_cost && fill < best_fill))))
        best = g, best_over = o, best_cost = cost, best_fill = fill;
    }
    place(i, best, +1);
  }

  for (int pass = 0; pass < 200; ++pass) {
    bool improved = false;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) {
        const int64_t a = group_of[i], b = group_of[j];
        if (a == b)
          continue;
        const double wi = ls.load(items[i]), wj = ls.load(items[j]);
        const double cij = ls.pair(items[i], items[j]);
        // i moves a -> b, j moves b -> a.
        const double pairs_a = -affinity[i * G + a] + affinity[j * G + a] - cij;
        const double pairs_b = -affinity[j * G + b] + affinity[i * G + b] - cij;
        const double delta = groups[a].outside * ((wj - wi) - pairs_a)
                             + groups[b].outside * ((wi - wj) - pairs_b);
        const double before = over(a, load[a]) + over(b, load[b]);
        const double after = over(a, load[a] - wi + wj)
                             + over(b, load[b] - wj + wi);
        if (after < before - 1e-12
            || (after <= before + 1e-12 && delta < -1e-9)) {
          place(i, a, -1);
          place(j, b, -1);
          place(i, b, +1);
          place(j, a, +1);
          improved = true;
        }
      }
    if (!improved)
      break;
  }
  return group_of;
}

double layer_total(const layer_stats& ls, int64_t experts) {
  double t = 0;
  for (int64_t e = 0; e < experts; ++e)
    t += ls.load(e);
  return t;
}

// Rank loads of one layer of `plan`.
std::vector<double> rank_loads(const placement_plan& plan,
                               const layer_stats& ls) {
  const int64_t S = plan.slots_per_rank();
  std::vector<double> out(plan.ranks, 0.0);
  for (int64_t s = 0; s < plan.experts; ++s)
    out[s / S] += ls.load(plan.expert_in(ls.l, s));
  return out;
}

// Where a partition at the rank level still leaves a rank above the bound:
// swaps between ranks that lower the heaviest rank, each time the one that
// loses the fewest co-activations inside racks, then inside nodes.
void repair(placement_plan& plan, const layer_stats& ls, const topology& topo,
            double bound) {
  const int64_t E = plan.experts, S = plan.slots_per_rank(), P = plan.ranks;
  const double mean = layer_total(ls, E) / double(P);
  if (mean <= 0)
    return;
  int32_t* at = plan.expert_at.data() + ls.l * E;
  for (int round = 0; round < 4 * E; ++round) {
    auto loads = rank_loads(plan, ls);
    const auto heavy = std::max_element(loads.begin(), loads.end())
                       - loads.begin();
    if (loads[heavy] <= bound * mean)
      return;
    // Co-activation of expert e with the experts on ranks where pred(rank).
    auto together = [&](int64_t e, int64_t skip_slot, auto pred) {
      double sum = 0;
      for (int64_t s = 0; s < E; ++s)
        if (s != skip_slot && pred(s / S))
          sum += ls.pair(e, at[s]);
      return sum;
    };
    double best_score = 0;
    int64_t best_x = -1, best_y = -1;
    for (int64_t x = heavy * S; x < (heavy + 1) * S; ++x)
      for (int64_t y = 0; y < E; ++y) {
        const int64_t other = y / S;
        if (other == heavy)
          continue;
        const double wx = ls.load(at[x]), wy = ls.load(at[y]);
        if (wy >= wx)
          continue;
        const double new_heavy = loads[heavy] - wx + wy,
                     new_other = loads[other] - wy + wx;
        if (std::max(new_heavy, new_other) >= loads[heavy])
          continue;
        // Co-activations lost by moving x to other's place and y to heavy's.
        double lost = 0;
        for (auto [same, weight] :
             {std::pair{+[](const topology&t, int64_t r, int64_t q) {
                          return t.rack_of_rank(r) == t.rack_of_rank(q);
                        },
                        1e6},
              std::pair{+[](const topology&t, int64_t r, int64_t q) {
                          return t.node_of_rank[r] == t.node_of_rank[q];
                        },
                        1.0}}) {
          if (same(topo, heavy, other))
            continue;
          lost += weight
                  * (together(at[x], x,
                              [&](int64_t r) { return same(topo, r, heavy); })
                     - together(at[x], y,
                                [&](int64_t r) { return same(topo, r, other); })
                     + together(at[y], y,
                                [&](int64_t r) { return same(topo, r, other); })
                     - together(at[y], x, [&](int64_t r) {
                         return same(topo, r, heavy);
                       }));
        }
        if (best_x < 0 || lost < best_score)
          best_score = lost, best_x = x, best_y = y;
      }
    if (best_x < 0)
      return; // no swap lowers the heaviest rank
    std::swap(at[best_x], at[best_y]);
  }
}

// With chained layers: for each item (an expert of layer ls.l), the tokens
// that came to it from the experts of the layer before that sit on the
// ranks of each group ([item][group]); empty for the first layer.
std::vector<double> chained(const placement_plan& plan, const layer_stats& ls,
                            const std::vector<int32_t>& items,
                            const std::vector<std::vector<int64_t>>& groups) {
  if (ls.l == 0)
    return {};
  const int64_t S = plan.slots_per_rank(), G = int64_t(groups.size());
  std::vector<double> out(items.size() * G, 0.0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t rank : groups[g])
      for (int64_t s = rank * S; s < (rank + 1) * S; ++s) {
        const int32_t before = plan.expert_in(ls.l - 1, s);
        for (size_t i = 0; i < items.size(); ++i)
          out[i * G + g] += double(
            ls.st.transition_at(ls.l - 1, before, items[i]));
      }
  return out;
}

} // namespace

placement_plan plan_eplb(const routing_stats& st, const topology& topo) {
  const int64_t E = st.experts, P = topo.ranks, S = E / P;
  const int64_t nodes = topo.nodes();
  auto plan = placement_plan::contiguous(st.layers, E, P);
  // Ranks of each node, in order.
  std::vector<std::vector<int64_t>> ranks_of(nodes);
  for (int64_t r = 0; r < P; ++r)
    ranks_of[topo.node_of_rank[r]].push_back(r);
  for (int64_t l = 0; l < st.layers; ++l) {
    const layer_stats ls{st, l};
    // Groups: node-sized blocks of consecutive experts, heaviest first, each
    // to the lightest node that has room for it.
    std::vector<int64_t> group_start, group_size;
    for (int64_t n = 0, at = 0; n < nodes; ++n) {
      group_start.push_back(at);
      group_size.push_back(int64_t(ranks_of[n].size()) * S);
      at += group_size.back();
    }
    std::vector<double> group_load(nodes, 0.0);
    for (int64_t g = 0; g < nodes; ++g)
      for (int64_t e = group_start[g]; e < group_start[g] + group_size[g]; ++e)
        group_load[g] += ls.load(e);
    std::vector<int64_t> order(nodes);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return group_load[a] > group_load[b];
    });
    std::vector<int64_t> node_of_group(nodes, -1);
    std::vector<double> node_load(nodes, 0.0);
    std::vector<char> taken(nodes, 0);
    for (int64_t g : order) {
      int64_t best = -1;
      for (int64_t n = 0; n < nodes; ++n)
        if (!taken[n] && int64_t(ranks_of[n].size()) * S == group_size[g]
            && (best < 0 || node_load[n] < node_load[best]))
          best = n;
      taken[best] = 1;
      node_of_group[g] = best;
      node_load[best] += group_load[g];
    }
    // Within each node: experts heaviest first to the lightest rank with a
    // free slot (balanced packing).
    int32_t* at = plan.expert_at.data() + l * E;
    for (int64_t g = 0; g < nodes; ++g) {
      const auto& ranks = ranks_of[node_of_group[g]];
      std::vector<int64_t> experts(group_size[g]);
      std::iota(experts.begin(), experts.end(), group_start[g]);
      std::stable_sort(
        experts.begin(), experts.end(),
        [&](int64_t a, int64_t b) { return ls.load(a) > ls.load(b); });
      std::vector<double> load(ranks.size(), 0.0);
      std::vector<int64_t> used(ranks.size(), 0);
      for (int64_t e : experts) {
        size_t best = ranks.size();
        for (size_t k = 0; k < ranks.size(); ++k)
          if (used[k] < S && (best == ranks.size() || load[k] < load[best]))
            best = k;
        at[ranks[best] * S + used[best]++] = static_cast<int32_t>(e);
        load[best] += ls.load(e);
      }
    }
  }
  return plan;
}

expected<placement_plan> plan_rack_aware(const routing_stats& st,
                                         const topology& topo,
                                         planner_options options) {
  const int64_t E = st.experts, P = topo.ranks;
  if (P < 1 || E % P != 0)
    return status::error("placement: " + std::to_string(E)
                         + " experts do not divide over " + std::to_string(P)
                         + " ranks");
  if (!(options.max_imbalance >= 1.0))
    return status::error("placement: the load bound (max/mean) must be >= 1");
  if (!options.rack_affinity.empty()
      && int64_t(options.rack_affinity.size())
           != st.layers * E * topo.racks())
    return status::error("placement: rack affinity for another shape");
  const int64_t S = E / P;
  auto plan = placement_plan::contiguous(st.layers, E, P);

  for (int64_t l = 0; l < st.layers; ++l) {
    const layer_stats ls{st, l};
    const double mean = layer_total(ls, E) / double(P);
    // No layout beats the heaviest expert's own share: where that is above
    // the bound, the bound becomes it, so racks are not split for a balance
    // no rank can reach.
    double heaviest = 0;
    for (int64_t e = 0; e < E; ++e)
      heaviest = std::max(heaviest, ls.load(e));
    const double bound = std::max(options.max_imbalance,
                                  mean > 0 ? heaviest / mean : 0.0);
    // Upper levels keep half the slack, so ranks inside can still balance.
    const double upper = 1.0 + 0.5 * (bound - 1.0);
    auto spec = [&](int64_t ranks) {
      return group_spec{ranks * S, mean * double(ranks),
                        1.0 - double(ranks) / double(P)};
    };
    std::vector<int32_t> all(E);
    std::iota(all.begin(), all.end(), 0);
    // Ranks of each node and nodes of each rack, in order.
    std::vector<std::vector<int64_t>> ranks_of(topo.nodes()),
      nodes_of(topo.racks());
    for (int64_t r = 0; r < P; ++r)
      ranks_of[topo.node_of_rank[r]].push_back(r);
    for (int64_t n = 0; n < topo.nodes(); ++n)
      if (!ranks_of[n].empty())
        nodes_of[topo.rack_of_node[n]].push_back(n);

    // The ranks of each rack and each node, for chaining.
    auto ranks_in = [&](const std::vector<int64_t>& nodes) {
      std::vector<int64_t> out;
      for (auto n : nodes)
        out.insert(out.end(), ranks_of[n].begin(), ranks_of[n].end());
      return out;
    };
    auto link = [&](const std::vector<int32_t>& items,
                    const std::vector<std::vector<int64_t>>& groups) {
      return options.chain_layers ? chained(plan, ls, items, groups)
                                  : std::vector<double>{};
    };
    std::vector<group_spec> racks;
    std::vector<std::vector<int64_t>> rack_ranks;
    for (const auto& nodes : nodes_of) {
      rack_ranks.push_back(ranks_in(nodes));
      racks.push_back(spec(int64_t(rack_ranks.back().size())));
    }
    auto fixed = link(all, rack_ranks);
    if (!options.rack_affinity.empty()) {
      const int64_t R = int64_t(racks.size());
      fixed.resize(E * R, 0.0);
      for (int64_t e = 0; e < E; ++e)
        for (int64_t r = 0; r < R; ++r)
          fixed[e * R + r] += options.rack_affinity[(l * E + e) * R + r];
    }
    const auto rack_of = partition(all, racks, ls, upper, fixed);
    int32_t* at = plan.expert_at.data() + l * E;
    for (size_t k = 0; k < nodes_of.size(); ++k) {
      std::vector<int32_t> in_rack;
      for (int64_t i = 0; i < E; ++i)
        if (rack_of[i] == int64_t(k))
          in_rack.push_back(all[i]);
      std::vector<group_spec> nodes;
      std::vector<std::vector<int64_t>> node_ranks;
      for (auto n : nodes_of[k]) {
        nodes.push_back(spec(int64_t(ranks_of[n].size())));
        node_ranks.push_back(ranks_of[n]);
      }
      const auto node_of = partition(in_rack, nodes, ls, upper,
                                     link(in_rack, node_ranks));
      for (size_t m = 0; m < nodes_of[k].size(); ++m) {
        const auto& ranks = ranks_of[nodes_of[k][m]];
        std::vector<int32_t> in_node;
        for (size_t i = 0; i < in_rack.size(); ++i)
          if (node_of[i] == int64_t(m))
            in_node.push_back(in_rack[i]);
        std::vector<std::vector<int64_t>> each;
        for (auto r : ranks)
          each.push_back({r});
        const auto rank_of = partition(
          in_node, std::vector<group_spec>(ranks.size(), spec(1)), ls, bound,
          link(in_node, each));
        for (size_t q = 0; q < ranks.size(); ++q) {
          int64_t slot = ranks[q] * S;
          for (size_t i = 0; i < in_node.size(); ++i)
            if (rank_of[i] == int64_t(q))
              at[slot++] = in_node[i];
        }
      }
    }
    repair(plan, ls, topo, bound);
  }
  TUTTI_RETURN_IF_ERROR(plan.check());
  return plan;
}

} // namespace tutti::placement
