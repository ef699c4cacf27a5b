#include "tutti/gateway/autoscale.hpp"

#include <cstdio>

namespace tutti::gateway {

namespace {

double since(clock::time_point t, clock::time_point now) {
  return std::chrono::duration<double>(now - t).count();
}

} // namespace

void retire_drained(fleet& f) {
  for (auto it = f.replicas.begin(); it != f.replicas.end();) {
    auto& r = **it;
    if (r.role == replica_role::draining && r.outstanding == 0) {
      f.event("retired", r.id + " stopped (drained)");
      it = f.replicas.erase(it); // its process stops with the last reference
    } else
      ++it;
  }
}

void autoscale(fleet& f, clock::time_point now, const replica_starter& start) {
  const auto& p = f.cfg.autoscale;
  if (!p.enabled)
    return;
  int64_t serving = 0, spares = 0, outstanding = 0;
  std::shared_ptr<replica> ready_spare, newest_serving;
  for (const auto& r : f.replicas) {
    if (r->group != "stable")
      continue;
    if (r->role == replica_role::serving) {
      ++serving;
      outstanding += r->outstanding;
      newest_serving = r; // replicas are kept in start order
    } else if (r->role == replica_role::spare) {
      ++spares;
      if (r->healthy && !ready_spare)
        ready_spare = r;
    }
  }
  const double queue = serving ? static_cast<double>(outstanding) / serving
                               : 0.0;
  const double ttft = median(f.stable_window.ttft_s);
  const bool pressure = queue > p.scale_up_queue
                        || (p.scale_up_ttft_s > 0
                            && f.stable_window.ttft_s.size() >= 3
                            && ttft > p.scale_up_ttft_s);
  if (pressure && serving < p.max_replicas) {
    if (f.pressure_since == clock::time_point{})
      f.pressure_since = now;
    if (since(f.pressure_since, now) >= p.scale_up_after_s) {
      f.pressure_since = now; // the next one needs its own while
      ++f.scale_ups;
      char why[160];
      std::snprintf(why, sizeof(why),
                    "%.1f outstanding per replica over %lld replicas, TTFT "
                    "median %.3f s",
                    queue, static_cast<long long>(serving), ttft);
      if (ready_spare) {
        ready_spare->role = replica_role::serving;
        ready_spare->scale_decided = now;
        --spares;
        f.event("scale_up", "warm spare " + ready_spare->id
                              + " takes traffic (" + why + ")");
      } else if (auto r = start(replica_role::serving)) {
        r->scale_decided = now;
        f.event("scale_up", "started " + r->id + " cold (" + why + ")");
      }
      ++serving;
    }
  } else {
    f.pressure_since = {};
  }

  if (outstanding == 0 && serving > p.min_replicas) {
    if (f.idle_since == clock::time_point{})
      f.idle_since = now;
    if (since(f.idle_since, now) >= p.scale_down_idle_s && newest_serving) {
      f.idle_since = now;
      ++f.scale_downs;
      --serving;
      if (spares < p.warm_spares) {
        newest_serving->role = replica_role::spare;
        ++spares;
        f.event("scale_down", newest_serving->id
                                + " is a warm spare again (idle)");
      } else {
        newest_serving->role = replica_role::draining;
        f.event("scale_down", newest_serving->id + " drains (idle)");
      }
    }
  } else if (outstanding > 0) {
    f.idle_since = {};
  }

  while (spares < p.warm_spares && serving + spares < p.max_replicas
                                                        + p.warm_spares) {
    auto r = start(replica_role::spare);
    if (!r)
      break;
    ++spares;
    f.event("spare", "started " + r->id + " as a warm spare");
  }
}

} // namespace tutti::gateway
