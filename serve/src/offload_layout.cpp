#include "tutti/serve/offload_layout.hpp"

#include <string>

namespace tutti::serve {

expected<expert_layout> with_offload(const expert_layout& base,
                                     const std::vector<int64_t>& load,
                                     double threshold, int64_t rank) {
  const int64_t L = base.layers, E = base.experts, P = base.ranks;
  if (rank < 0 || rank >= P)
    return status::error("the offload rank " + std::to_string(rank)
                         + " is not one of the " + std::to_string(P)
                         + " ranks");
  if (P < 2)
    return status::error("offload needs a second rank for the experts in use");
  if (static_cast<int64_t>(load.size()) != L * E)
    return status::error("the statistics count " + std::to_string(load.size())
                         + " experts, the model has " + std::to_string(L)
                         + " layers of " + std::to_string(E));
  if (!(threshold >= 0.0 && threshold <= 1.0))
    return status::error("the threshold must be a share in [0, 1]");
  std::vector<int32_t> owner(L * E);
  std::vector<char> cold(L * E, 0);
  for (int64_t l = 0; l < L; ++l) {
    int64_t total = 0;
    for (int64_t e = 0; e < E; ++e)
      total += load[l * E + e];
    std::vector<int64_t> held(P, 0);
    for (int64_t e = 0; e < E; ++e) {
      const auto i = l * E + e;
      owner[i] = static_cast<int32_t>(base.rank_of(l, e));
      cold[i] = total > 0
                && static_cast<double>(load[i]) < threshold * double(total);
      if (cold[i])
        owner[i] = static_cast<int32_t>(rank);
      else if (owner[i] != rank)
        ++held[owner[i]];
    }
    // The offload rank's experts in use go to the least-held other rank
    // (the lowest such rank on a tie: the same layout on every daemon).
    for (int64_t e = 0; e < E; ++e) {
      const auto i = l * E + e;
      if (cold[i] || owner[i] != rank)
        continue;
      int64_t to = -1;
      for (int64_t r = 0; r < P; ++r)
        if (r != rank && (to < 0 || held[r] < held[to]))
          to = r;
      owner[i] = static_cast<int32_t>(to);
      ++held[to];
    }
  }
  auto out = expert_layout::from_owners(L, E, P, owner);
  if (!out)
    return out;
  out.value().offload_rank = rank;
  out.value().offloaded = std::move(cold);
  return out;
}

} // namespace tutti::serve
