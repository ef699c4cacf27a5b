#include "rank/routing_window.hpp"

namespace tutti {

routing_window::routing_window(const job_config& cfg)
  : window_(cfg.moe.routing_stats_window), last_step_(cfg.train.steps),
    counts_(placement::routing_stats::zeros(
      cfg.model.num_hidden_layers, cfg.moe.num_experts, cfg.moe.router_top_k)) {
}

std::vector<int32_t>* routing_window::ids_for_step() {
  if (window_ <= 0)
    return nullptr;
  ids_.clear();
  return &ids_;
}

status routing_window::after_step(int64_t step, comm::communicator& world,
                                  bool rank0, std::string& json_out) {
  if (window_ <= 0)
    return {};
  const int64_t per_token = counts_.layers * counts_.top_k;
  if (per_token > 0 && !ids_.empty())
    TUTTI_RETURN_IF_ERROR(
      counts_.add(ids_.data(), int64_t(ids_.size()) / per_token));
  if (counts_.first_step == 0)
    counts_.first_step = step;
  counts_.last_step = step;
  if (step % window_ != 0 && step != last_step_)
    return {};
  auto flat = counts_.to_flat();
  TUTTI_RETURN_IF_ERROR(world.all_reduce_sum(flat.data(), flat.size()));
  TUTTI_RETURN_IF_ERROR(counts_.from_flat(flat));
  if (rank0)
    json_out = counts_.to_json();
  counts_ = placement::routing_stats::zeros(counts_.layers, counts_.experts,
                                            counts_.top_k);
  return {};
}

} // namespace tutti
