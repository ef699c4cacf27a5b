#include "tutti/placement/job_placement.hpp"

namespace tutti::placement {

expected<placement_plan> plan_for(const job_config& cfg) {
  const int64_t layers = cfg.model.num_hidden_layers;
  const int64_t experts = cfg.moe.num_experts, ranks = cfg.ep_size();
  if (cfg.moe.placement.empty())
    return placement_plan::contiguous(layers, experts, ranks);
  auto plan = placement_plan::read(cfg.moe.placement);
  if (!plan.ok())
    return status::error("moe_config.placement: " + plan.message());
  const auto& p = plan.value();
  if (p.layers != layers || p.experts != experts || p.ranks != ranks)
    return status::error(
      "moe_config.placement: " + cfg.moe.placement + " places "
      + std::to_string(p.experts) + " experts of " + std::to_string(p.layers)
      + " layers on " + std::to_string(p.ranks) + " ranks; the job has "
      + std::to_string(experts) + " experts, " + std::to_string(layers)
      + " layers and ep_size " + std::to_string(ranks));
  return plan;
}

} // namespace tutti::placement
