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
  if (cfg.data.rack_affinity
      && (p.token_vocab() != cfg.model.vocab_size
          || p.token_top_k != cfg.moe.router_top_k))
    return status::error(
      "data.rack_affinity: moe_config.placement " + cfg.moe.placement
      + (p.token_top_k == 0
           ? std::string(" has no token_experts")
           : " has token_experts for " + std::to_string(p.token_vocab())
               + " tokens, top-" + std::to_string(p.token_top_k))
      + "; the job needs " + std::to_string(cfg.model.vocab_size) + ", top-"
      + std::to_string(cfg.moe.router_top_k)
      + " (tutti placement plan --method affinity --model EXPORT_DIR)");
  return plan;
}

} // namespace tutti::placement
