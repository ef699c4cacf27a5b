#include "tutti/serve/rack_replan.hpp"

#include <algorithm>
#include <tuple>

namespace tutti::serve {

double cross_rack_share(const expert_layout& x,
                        const std::vector<int64_t>& rows,
                        const std::vector<int32_t>& rack) {
  const int64_t L = x.layers, E = x.experts, P = x.ranks;
  int64_t all = 0, crossing = 0;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t e = 0; e < E; ++e) {
      const auto home = rack[x.rank_of(l, e)];
      for (int64_t src = 0; src < P; ++src) {
        const auto n = rows[(src * L + l) * E + e];
        all += n;
        if (rack[src] != home)
          crossing += n;
      }
    }
  return all > 0 ? double(crossing) / double(all) : 0.0;
}

expert_layout plan_by_origin(const expert_layout& current,
                             const std::vector<int64_t>& rows,
                             const std::vector<int32_t>& rack) {
  const int64_t L = current.layers, E = current.experts, P = current.ranks;
  const int32_t racks = *std::max_element(rack.begin(), rack.end()) + 1;
  std::vector<int32_t> owner(L * E, -1);
  for (int64_t l = 0; l < L; ++l) {
    std::vector<int64_t> free(P);
    std::vector<int64_t> rack_free(racks, 0);
    for (int64_t r = 0; r < P; ++r) {
      free[r] = current.end(l, r) - current.begin(l, r);
      rack_free[rack[r]] += free[r];
    }
    // (rows from the rack, expert, rack), most rows first; ties by expert
    // then rack, so every daemon computes the same plan.
    std::vector<std::tuple<int64_t, int64_t, int32_t>> wants;
    for (int64_t e = 0; e < E; ++e) {
      std::vector<int64_t> from(racks, 0);
      for (int64_t src = 0; src < P; ++src)
        from[rack[src]] += rows[(src * L + l) * E + e];
      for (int32_t k = 0; k < racks; ++k)
        wants.emplace_back(from[k], e, k);
    }
    std::stable_sort(wants.begin(), wants.end(), [](auto& a, auto& b) {
      return std::get<0>(a) > std::get<0>(b);
    });
    std::vector<int32_t> chosen(E, -1);
    for (const auto& [n, e, k] : wants)
      if (chosen[e] < 0 && rack_free[k] > 0) {
        chosen[e] = k;
        --rack_free[k];
      }
    // Within the chosen rack: the expert's own rank if it has room (no
    // move), else the rack's rank with the most room left.
    for (int64_t e = 0; e < E; ++e) {
      const auto now = current.rank_of(l, e);
      if (rack[now] == chosen[e] && free[now] > 0) {
        owner[l * E + e] = static_cast<int32_t>(now);
        --free[now];
      }
    }
    for (int64_t e = 0; e < E; ++e) {
      if (owner[l * E + e] >= 0)
        continue;
      int64_t to = -1;
      for (int64_t r = 0; r < P; ++r)
        if (rack[r] == chosen[e] && free[r] > 0 && (to < 0 || free[r] > free[to]))
          to = r;
      owner[l * E + e] = static_cast<int32_t>(to);
      --free[to];
    }
  }
  // Within a rank, experts keep their id order (from_owners).
  return expert_layout::from_owners(L, E, P, owner).value();
}

} // namespace tutti::serve
