#include "tutti/train/job_dashboard.hpp"

#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tutti/placement/job_placement.hpp"
#include "tutti/placement/routing_stats.hpp"
#include "tutti/runtime/node_endpoint.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti {

dashboard::overview job_overview(const job_config& cfg) {
  dashboard::overview o;
  o.kind = "training";
  o.title = cfg.source_path.empty() ? cfg.run.dir : cfg.source_path;
  for (int64_t n = 0; n < cfg.cluster.nnodes; ++n) {
    const auto at = cfg.cluster.node(n);
    o.nodes.push_back({at.host, at.rack, n * cfg.cluster.nproc_per_node,
                       cfg.cluster.nproc_per_node});
  }
  o.layers = cfg.model.num_hidden_layers;
  o.experts = cfg.moe.num_experts;
  o.steps = cfg.train.steps;
  // EP member m of the first group is global rank m.
  if (auto plan = placement::plan_for(cfg); plan.ok()) {
    for (int64_t l = 0; l < o.layers; ++l)
      for (int64_t e = 0; e < o.experts; ++e)
        o.expert_rank.push_back(
          plan.value().rank_of(l, static_cast<int32_t>(e)));
  }
  const auto& a = cfg.alerts;
  o.thresholds = {{"cross_rack_share", a.cross_rack_share},
                  {"expert_imbalance", a.expert_imbalance},
                  {"low_utilisation", a.low_utilisation},
                  {"data_wait", a.data_wait}};
  return o;
}

std::vector<dashboard::timeline_event> job_events(store::job_store& db,
                                                  int64_t since_ms) {
  std::vector<dashboard::timeline_event> out;
  auto events = db.events(since_ms);
  if (!events)
    throw std::runtime_error(events.message());
  for (auto& e : *events)
    out.push_back({e.time_unix_ms, std::move(e.kind), std::move(e.detail)});
  return out;
}

std::string newest_coactivation(store::job_store& db, int64_t layer) {
  auto windows = db.routing_windows();
  if (!windows)
    throw std::runtime_error(windows.message());
  if (windows->empty())
    return "";
  auto stats = placement::routing_stats::from_json(windows->back().second);
  if (!stats)
    throw std::runtime_error("routing window at step "
                             + std::to_string(windows->back().first) + ": "
                             + stats.message());
  const auto& s = *stats;
  if (layer < 0 || layer >= s.layers)
    throw std::out_of_range("layer " + std::to_string(layer)
                            + " is outside the model's 0.."
                            + std::to_string(s.layers - 1));
  nlohmann::json counts = nlohmann::json::array();
  for (int64_t e = 0; e < s.experts; ++e) {
    std::vector<int64_t> row;
    for (int64_t f = 0; f < s.experts; ++f)
      row.push_back(s.coactivation_at(layer, e, f));
    counts.push_back(std::move(row));
  }
  return nlohmann::json{{"layer", layer},
                        {"experts", s.experts},
                        {"first_step", s.first_step},
                        {"last_step", s.last_step},
                        {"tokens", s.tokens},
                        {"counts", std::move(counts)}}
    .dump();
}

dashboard::sources job_dashboard(
  const job_config& cfg, std::vector<std::shared_ptr<metrics_board>> boards,
  std::shared_ptr<const job_store_slot> store) {
  dashboard::sources s;
  s.about = job_overview(cfg);
  s.metrics = [boards = std::move(boards)] { return read_boards(boards); };
  s.step_log = (std::filesystem::path(cfg.run.dir) / "metrics.jsonl").string();
  s.events = [store](int64_t since_ms) {
    auto db = store ? store->get() : nullptr;
    return db ? job_events(*db, since_ms)
              : std::vector<dashboard::timeline_event>{};
  };
  s.coactivation = [store](int64_t layer) {
    auto db = store ? store->get() : nullptr;
    return db ? newest_coactivation(*db, layer) : std::string();
  };
  return s;
}

} // namespace tutti
