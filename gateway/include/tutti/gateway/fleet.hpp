#pragma once
// What the gateway knows about its replicas, under one lock: each
// replica's health, circuit breaker and outstanding requests, the traffic
// share of the canary version, the per-version request statistics of the
// current rollout step, and the event log. The proxy leases replicas from
// it (least outstanding requests first); the control actor probes health,
// judges the rollout and scales (rollout.hpp, autoscale.hpp).

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tutti/gateway/circuit_breaker.hpp"
#include "tutti/config/gateway_config.hpp"

namespace tutti::gateway {

using clock = std::chrono::steady_clock;

enum class replica_role {
  serving,  // takes traffic
  spare,    // warm: model loaded, takes no traffic until promoted
  draining, // takes no new traffic; retired when its requests end
  retired   // stopped; kept out of every count
};
const char* role_name(replica_role r);

// A replica the gateway started: stops it (SIGTERM, then SIGKILL) when the
// last reference goes.
struct launched_process {
  virtual ~launched_process() = default;
  virtual bool running() = 0;
};

struct replica {
  replica(std::string id, std::string group, std::string version,
          replica_address a, const gateway_config& cfg);
  std::string id;      // "stable-0", "canary-1", ...
  std::string group;   // "stable" or "canary"
  std::string version; // the group's version
  replica_address address;
  replica_role role = replica_role::serving;
  bool healthy = false;       // the last /ready probe answered 200
  int64_t probe_failures = 0; // in a row
  int64_t outstanding = 0;    // requests sent and not ended
  int64_t requests = 0, failures = 0;
  circuit_breaker breaker;
  clock::time_point started = clock::now();
  clock::time_point ready_at{}; // first healthy probe
  // Autoscaling: when it was chosen to serve, and its first request then
  // (the time a spare or a cold start takes to take traffic).
  clock::time_point scale_decided{};
  bool took_traffic = false;
  std::shared_ptr<launched_process> process;
};

// One version's requests in the current rollout step.
struct version_window {
  int64_t requests = 0, errors = 0;
  std::vector<double> ttft_s, tpot_s;
  double error_rate() const {
    return requests ? static_cast<double>(errors) / requests : 0.0;
  }
  void clear() { *this = version_window(); }
};
double median(std::vector<double> v); // 0 for none

struct fleet_event {
  int64_t seq = 0;
  int64_t unix_ms = 0;
  std::string kind, detail;
};

enum class rollout_phase { none, running, promoted, rolled_back };
const char* phase_name(rollout_phase p);

// How a leased request ended.
struct request_outcome {
  enum kind { ok, failed, abandoned } what = ok;
  double ttft_s = -1, tpot_s = -1; // -1: not measured
  bool count_for_version = true;   // false: the client's fault (4xx)
};

class fleet {
public:
  explicit fleet(const gateway_config& cfg);

  // A replica for a request: the canary group for its share of requests
  // (when running and able), else stable; within the group the least
  // outstanding among serving, healthy replicas whose breaker allows and
  // that are under replica_max_outstanding; none of `tried`. Null if none:
  // `saturated` says whether some were only full.
  std::shared_ptr<replica> lease(const std::set<std::string>& tried,
                                 bool& saturated);
  void release(const std::shared_ptr<replica>& r, const request_outcome& o);

  void add(std::shared_ptr<replica> r);
  void event(const std::string& kind, const std::string& detail);

  // The gateway's own concurrency limit.
  bool enter();
  void leave();

  std::mutex mutex; // guards everything below
  const gateway_config cfg;
  std::vector<std::shared_ptr<replica>> replicas;
  int64_t in_flight = 0;
  int64_t retries = 0, rejected_busy = 0, rejected_none = 0;
  int64_t canary_requests_total = 0, stable_requests_total = 0;
  // Rollout.
  rollout_phase phase = rollout_phase::none;
  std::string stable_version, canary_version;
  size_t step = 0; // index into cfg.rollout.steps
  double canary_share = 0; // percent
  double canary_credit = 0;
  clock::time_point step_started = clock::now();
  version_window stable_window, canary_window;
  int64_t rollbacks = 0, promotions = 0;
  // The canary's first failed request in this rollout, and the time from
  // it to the rollback (what bench/bench_gateway.sh reports).
  clock::time_point first_canary_failure{};
  double rollback_after_failure_s = -1;
  bool alert = false; // a rollback happened; cleared by a new rollout
  std::string alert_reason;
  // Autoscaling.
  int64_t scale_ups = 0, scale_downs = 0, next_replica_id = 0;
  clock::time_point pressure_since{}, idle_since{};
  double last_take_traffic_s = -1; // a scale-up's time to first traffic
  std::deque<fleet_event> events;
  int64_t next_event = 1;

private:
  std::shared_ptr<replica> pick_in(const std::string& group,
                                   const std::set<std::string>& tried,
                                   clock::time_point now, bool& saturated);
};

} // namespace tutti::gateway
