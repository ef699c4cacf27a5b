#include "tutti/moe/rack_routing.hpp"

#include <set>

#include "tutti/moe/rack_exchange.hpp"

namespace tutti::moe {

rack_routing rack_routing_of(const job_config& cfg, int64_t world_rank,
                             const std::vector<int32_t>& slot_of_expert) {
  const auto layout = rack_layout::of_group(cfg, world_rank);
  rack_routing r;
  r.racks = layout.racks();
  const int64_t E = cfg.moe.num_experts, groups = cfg.moe.n_group;
  const int64_t per_rank = cfg.experts_per_rank(), per_group = E / groups;
  const int64_t layers =
    slot_of_expert.empty() ? 1 : int64_t(slot_of_expert.size()) / E;
  auto rack_of_expert = [&](int64_t layer, int64_t e) {
    const int64_t slot =
      slot_of_expert.empty() ? e : slot_of_expert[size_t(layer * E + e)];
    return layout.rack_of(slot / per_rank);
  };
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t g = 0; g < groups; ++g) {
      std::set<int64_t> racks;
      for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e)
        racks.insert(rack_of_expert(l, e));
      if (racks.size() > 1) {
        r.spanning = "group " + std::to_string(g) + " (experts "
                     + std::to_string(g * per_group) + "-"
                     + std::to_string((g + 1) * per_group - 1) + ") of layer "
                     + std::to_string(l) + " spans "
                     + std::to_string(racks.size()) + " racks";
        return r;
      }
    }
  r.rack_limited = true;
  return r;
}

std::string rack_routing_note(const job_config& cfg, const rack_routing& r) {
  const auto& e = cfg.moe;
  if (r.racks < 2 || e.n_group < 2)
    return "";
  if (!r.rack_limited)
    return "; moe_config.n_group: " + r.spanning
           + ", so routing limits groups, not racks";
  return "; rack-limited routing: each token's experts in at most "
         + std::to_string(std::min(e.topk_group, r.racks)) + " of "
         + std::to_string(r.racks) + " racks (" + std::to_string(e.n_group)
         + " expert groups, each in one rack; topk_group "
         + std::to_string(e.topk_group) + ")";
}

} // namespace tutti::moe
