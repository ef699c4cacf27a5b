#pragma once
// The dashboard: a read-only web page at /dashboard and the JSON it polls,
// added to a server that already answers /metrics (a daemon's or `tutti
// run`'s metrics endpoint, `tutti serve`'s front), so it is behind the
// same TLS and auth. Every route is a GET; nothing here can change the job.
//
//   /dashboard              the page (HTML, CSS and JS in one answer)
//   /dashboard/api/overview what does not change: kind, nodes, racks,
//                           ranks, experts and where they live, thresholds
//   /dashboard/api/metrics  this process's /metrics text as JSON
//   /dashboard/api/steps    ?since=STEP&window=N: the run's step records
//                           (RUN_DIR/metrics.jsonl) after STEP, and the
//                           expert counts summed over the last N steps
//   /dashboard/api/events   ?since=UNIX_MS: the timeline
//   /dashboard/api/coactivation  ?layer=L: how often each pair of experts
//                           of layer L took the same token, in the newest
//                           window of routing statistics

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tutti/net/http_server.hpp"

namespace tutti::dashboard {

struct node_view {
  std::string host, rack;
  int64_t first_rank = 0, ranks = 0;
};

// What the page draws its frame from; fixed for the life of the process.
struct overview {
  std::string kind;  // "training" or "serving"
  std::string title; // the config file or the model
  std::vector<node_view> nodes;
  int64_t layers = 0, experts = 0, steps = 0;
  // [layer * experts + expert] -> the rank holding it; empty: not known.
  std::vector<int64_t> expert_rank;
  // Alert thresholds the charts draw as lines (0: off), by rule name
  // (alerts.cross_rack_share, alerts.expert_imbalance, ...).
  std::map<std::string, double> thresholds;
};

struct timeline_event {
  int64_t time_ms = 0; // unix
  std::string kind;    // "alert", "checkpoint_committed", "restart", ...
  std::string text;
};

struct sources {
  overview about;
  // This process's Prometheus text (what /metrics answers).
  std::function<std::string()> metrics;
  // RUN_DIR/metrics.jsonl of a training run; "" for none.
  std::string step_log;
  // The timeline since a unix time in ms; empty for none.
  std::function<std::vector<timeline_event>(int64_t since_ms)> events;
  // A layer's co-activation, {"layer", "experts", "first_step",
  // "last_step", "tokens", "counts": [[...] per expert]} as JSON, or ""
  // when there is none yet; empty for a process that has none. A layer
  // outside the model throws std::out_of_range (the answer is a 400).
  std::function<std::string(int64_t layer)> coactivation;
};

// Adds the routes above to `server` (before it starts). A source that
// throws answers 500 with the reason.
void add_routes(net::http_server& server, sources from);

// As add_routes, for a caller that takes the routes as one function (the
// metrics endpoint's `more_routes`).
std::function<void(net::http_server&)> routes(sources from);

} // namespace tutti::dashboard
