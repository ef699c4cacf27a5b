#include "tutti/gateway/fleet.hpp"

#include <algorithm>
#include <cstdio>

#include "tutti/runtime/log.hpp"

namespace tutti::gateway {

namespace {

clock::duration seconds(double s) {
  return std::chrono::duration_cast<clock::duration>(
    std::chrono::duration<double>(s));
}

} // namespace

const char* role_name(replica_role r) {
  switch (r) {
  case replica_role::serving:
    return "serving";
  case replica_role::spare:
    return "spare";
  case replica_role::draining:
    return "draining";
  default:
    return "retired";
  }
}

const char* phase_name(rollout_phase p) {
  switch (p) {
  case rollout_phase::none:
    return "none";
  case rollout_phase::running:
    return "running";
  case rollout_phase::promoted:
    return "promoted";
  default:
    return "rolled_back";
  }
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

replica::replica(std::string id_, std::string group_, std::string version_,
                 replica_address a, const gateway_config& cfg)
  : id(std::move(id_)), group(std::move(group_)),
    version(std::move(version_)), address(std::move(a)),
    breaker(cfg.breaker_failures, seconds(cfg.breaker_open_s)) {}

fleet::fleet(const gateway_config& c)
  : cfg(c), stable_version(c.stable.version),
    canary_version(c.canary.version) {
  if (c.canary.given()) {
    phase = rollout_phase::running;
    canary_share = c.rollout.steps.front();
  }
}

void fleet::add(std::shared_ptr<replica> r) {
  std::lock_guard<std::mutex> lock(mutex);
  replicas.push_back(std::move(r));
}

void fleet::event(const std::string& kind, const std::string& detail) {
  fleet_event e;
  e.seq = next_event++;
  e.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  e.kind = kind;
  e.detail = detail;
  events.push_back(e);
  while (events.size() > 1000)
    events.pop_front();
  // One line on stdout for whoever runs the gateway, and the log file.
  std::printf("gateway: %s: %s\n", kind.c_str(), detail.c_str());
  std::fflush(stdout);
  log_info("gateway", kind + ": " + detail);
}

bool fleet::enter() {
  std::lock_guard<std::mutex> lock(mutex);
  if (in_flight >= cfg.max_in_flight) {
    ++rejected_busy;
    return false;
  }
  ++in_flight;
  return true;
}

void fleet::leave() {
  std::lock_guard<std::mutex> lock(mutex);
  --in_flight;
}

std::shared_ptr<replica> fleet::pick_in(const std::string& group,
                                        const std::set<std::string>& tried,
                                        clock::time_point now,
                                        bool& saturated) {
  std::shared_ptr<replica> best;
  for (const auto& r : replicas) {
    if (r->group != group || r->role != replica_role::serving || !r->healthy
        || tried.count(r->id) || !r->breaker.would_allow(now))
      continue;
    if (r->outstanding >= cfg.replica_max_outstanding) {
      saturated = true;
      continue;
    }
    if (!best || r->outstanding < best->outstanding)
      best = r;
  }
  if (best)
    best->breaker.allow(now); // takes the half-open trial, if it is one
  return best;
}

std::shared_ptr<replica> fleet::lease(const std::set<std::string>& tried,
                                      bool& saturated) {
  std::lock_guard<std::mutex> lock(mutex);
  const auto now = clock::now();
  saturated = false;
  std::shared_ptr<replica> r;
  // The canary's share by credit: exact over any run of requests (1% is
  // every hundredth), not left to chance in a short test.
  if (phase == rollout_phase::running && canary_share > 0) {
    canary_credit += canary_share / 100.0;
    if (canary_credit >= 1.0 - 1e-9) {
      r = pick_in("canary", tried, now, saturated);
      if (r)
        canary_credit -= 1.0;
      else
        canary_credit = 1.0; // no canary free now: not owed later in a burst
    }
  }
  if (!r)
    r = pick_in("stable", tried, now, saturated);
  if (!r && phase == rollout_phase::promoted)
    r = pick_in("canary", tried, now, saturated);
  if (!r) {
    ++(saturated ? rejected_busy : rejected_none);
    return nullptr;
  }
  ++r->outstanding;
  ++r->requests;
  if (r->scale_decided != clock::time_point{} && !r->took_traffic) {
    r->took_traffic = true;
    last_take_traffic_s =
      std::chrono::duration<double>(now - r->scale_decided).count();
    event("took_traffic", r->id + " took its first request "
                            + std::to_string(last_take_traffic_s)
                            + " s after the scale-up");
  }
  ++(r->group == "canary" ? canary_requests_total : stable_requests_total);
  return r;
}

void fleet::release(const std::shared_ptr<replica>& r,
                    const request_outcome& o) {
  std::lock_guard<std::mutex> lock(mutex);
  --r->outstanding;
  const auto now = clock::now();
  if (o.what == request_outcome::abandoned) {
    r->breaker.abandoned();
    return;
  }
  auto& w = r->group == "canary" ? canary_window : stable_window;
  if (o.what == request_outcome::failed) {
    ++r->failures;
    if (r->group == "canary" && phase == rollout_phase::running
        && first_canary_failure == clock::time_point{})
      first_canary_failure = now;
    if (r->breaker.failed(now))
      event("breaker_open", r->id + " (" + r->address.host + ":"
                              + std::to_string(r->address.port)
                              + ") failed; no traffic for "
                              + std::to_string(cfg.breaker_open_s) + " s");
  } else {
    const bool was_open = r->breaker.current() != circuit_breaker::state::closed;
    r->breaker.succeeded();
    if (was_open)
      event("breaker_closed", r->id + " answered its trial request");
  }
  if (!o.count_for_version)
    return;
  ++w.requests;
  if (o.what == request_outcome::failed)
    ++w.errors;
  if (o.ttft_s >= 0)
    w.ttft_s.push_back(o.ttft_s);
  if (o.tpot_s >= 0)
    w.tpot_s.push_back(o.tpot_s);
}

} // namespace tutti::gateway
