#pragma once
// What the dashboard (dashboard/) shows of a training process, `tutti run`
// or a daemon: the job's shape from its config (nodes, racks, ranks, where
// each expert lives, the alert thresholds), the text of its /metrics
// boards, the run's step log and the job store's events.

#include <memory>
#include <mutex>
#include <vector>

#include "tutti/config/job_config.hpp"
#include "tutti/dashboard/dashboard.hpp"
#include "tutti/runtime/metrics_board.hpp"

namespace tutti::store {
class job_store;
}

namespace tutti {

// The job's frame: nodes as cluster_config lists them, experts by the
// configured placement (moe_config.placement; a plan the coordinator makes
// after a spare joins is not shown).
dashboard::overview job_overview(const job_config& cfg);

// Where the job store will be: a daemon serves its dashboard before node 0
// has opened the store, and other nodes never do (no events there).
class job_store_slot {
public:
  void set(std::shared_ptr<store::job_store> db) {
    std::lock_guard<std::mutex> guard(mutex_);
    db_ = std::move(db);
  }
  std::shared_ptr<store::job_store> get() const {
    std::lock_guard<std::mutex> guard(mutex_);
    return db_;
  }

private:
  mutable std::mutex mutex_;
  std::shared_ptr<store::job_store> db_;
};

dashboard::sources job_dashboard(
  const job_config& cfg, std::vector<std::shared_ptr<metrics_board>> boards,
  std::shared_ptr<const job_store_slot> store);

// Layer `layer`'s co-activation in the newest routing window the job kept
// (moe_config.routing_stats_window), as dashboard::sources' coactivation
// gives it; "" without a window.
std::string newest_coactivation(store::job_store& db, int64_t layer);

// The job store's events as the dashboard's timeline.
std::vector<dashboard::timeline_event> job_events(store::job_store& db,
                                                  int64_t since_ms);

} // namespace tutti
