#include "tutti/serve/live_replan.hpp"

#include <map>

#include "tutti/runtime/log.hpp"
#include "tutti/serve/ep_ranks.hpp"
#include "tutti/serve/rack_replan.hpp"

namespace tutti::serve {

expected<std::vector<int32_t>> rack_indices(
  const std::vector<std::string>& names, int64_t ranks) {
  if (static_cast<int64_t>(names.size()) != ranks)
    return status::error("serve.racks: lists " + std::to_string(names.size())
                         + " racks; the replica has " + std::to_string(ranks)
                         + " ranks (one rack each)");
  std::map<std::string, int32_t> index;
  std::vector<int32_t> out;
  for (const auto& n : names) {
    const auto at = index.emplace(n, static_cast<int32_t>(index.size()));
    out.push_back(at.first->second);
  }
  return out;
}

void live_replanner::after_step(ep_ranks& ranks) {
  if (++steps_ % config_.window_steps != 0)
    return;
  const auto x = ranks.layout();
  const int64_t L = x->layers, E = x->experts, P = x->ranks;
  // Rows by source: this process's ranks (across daemons node 0's is rank
  // 0, and the other nodes hold no sequences).
  std::vector<int64_t> now(P * L * E, 0);
  for (int64_t r = 0; r < ranks.size() && r < P; ++r) {
    const auto& a = ranks.rank_activations(r);
    std::copy(a.begin(), a.end(), now.begin() + r * L * E);
  }
  if (start_.size() != now.size())
    start_.assign(now.size(), 0);
  std::vector<int64_t> window(now.size());
  for (size_t i = 0; i < now.size(); ++i)
    window[i] = now[i] - start_[i];
  start_ = now;
  share_ = serve::cross_rack_share(*x, window, config_.rack);
  if (share_ <= config_.max_cross_rack_share)
    return;
  auto plan = std::make_shared<const expert_layout>(
    plan_by_origin(*x, window, config_.rack));
  const double after = serve::cross_rack_share(*plan, window, config_.rack);
  if (after >= share_)
    return;
  if (auto s = ranks.set_layout(plan); !s.ok()) {
    log_warn("serve", "replan by rack refused: " + s.message());
    return;
  }
  ++replans_;
  log_info("serve", "experts replanned by rack: the last "
                      + std::to_string(config_.window_steps)
                      + " steps' cross-rack share " + std::to_string(share_)
                      + " (bound "
                      + std::to_string(config_.max_cross_rack_share)
                      + ") would have been " + std::to_string(after)
                      + " with the new layout, in effect from the next step");
}

} // namespace tutti::serve
