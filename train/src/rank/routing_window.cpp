#include "rank/routing_window.hpp"

#include <algorithm>

namespace tutti {

routing_window::routing_window(const job_config& cfg)
  : window_(cfg.moe.routing_stats_window), last_step_(cfg.train.steps),
    micro_batches_(std::max<int64_t>(cfg.train.micro_batches, 1)),
    counts_(placement::routing_stats::zeros(
      cfg.model.num_hidden_layers, cfg.moe.num_experts, cfg.moe.router_top_k)) {
  for (int64_t l = 0; l < cfg.model.num_hidden_layers; ++l)
    routed_.push_back(!cfg.moe.dense_layer(l));
}

status routing_window::count_step() {
  // The forward appends each micro-batch's routing, routed layer by routed
  // layer: [micro-batch][routed layer][token][k]. Counted micro-batch by
  // micro-batch as [layer][token][k], a dense layer's block unrouted.
  const int64_t K = counts_.top_k, L = counts_.layers;
  const int64_t routed = std::count(routed_.begin(), routed_.end(), true);
  const int64_t per_micro = int64_t(ids_.size()) / micro_batches_;
  if (routed == 0 || K == 0 || ids_.empty())
    return {};
  if (per_micro * micro_batches_ != int64_t(ids_.size())
      || per_micro % (routed * K) != 0)
    return status::error("routing statistics: " + std::to_string(ids_.size())
                         + " ids do not split into "
                         + std::to_string(micro_batches_)
                         + " micro-batches of " + std::to_string(routed)
                         + " routed layers");
  const int64_t n = per_micro / (routed * K);
  std::vector<int32_t> batch(static_cast<size_t>(L * n * K));
  for (int64_t micro = 0; micro < micro_batches_; ++micro) {
    const int32_t* from = ids_.data() + micro * per_micro;
    for (int64_t l = 0; l < L; ++l) {
      int32_t* to = batch.data() + l * n * K;
      if (!routed_[l]) {
        std::fill(to, to + n * K, placement::routing_stats::unrouted);
        continue;
      }
      std::copy(from, from + n * K, to);
      from += n * K;
    }
    TUTTI_RETURN_IF_ERROR(counts_.add(batch.data(), n));
  }
  return {};
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
  TUTTI_RETURN_IF_ERROR(count_step());
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
