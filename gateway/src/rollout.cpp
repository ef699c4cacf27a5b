#include "tutti/gateway/rollout.hpp"

#include <cstdio>

namespace tutti::gateway {

namespace {

std::string fixed(double v, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

void start_step(fleet& f, clock::time_point now) {
  f.canary_share = f.cfg.rollout.steps[f.step];
  f.canary_credit = 0;
  f.step_started = now;
  f.stable_window.clear();
  f.canary_window.clear();
}

void finish_promotion(fleet& f) {
  f.phase = rollout_phase::promoted;
  ++f.promotions;
  for (auto& r : f.replicas) {
    if (r->group == "stable" && r->role != replica_role::retired)
      r->role = replica_role::draining;
    else if (r->group == "canary")
      r->group = "stable";
  }
  f.event("promoted", f.canary_version + " is the stable version (was "
                        + f.stable_version + "); its replicas drain");
  f.stable_version = f.canary_version;
  f.canary_share = 0;
}

void advance(fleet& f, clock::time_point now, const std::string& why) {
  ++f.step;
  if (f.step >= f.cfg.rollout.steps.size())
    return finish_promotion(f);
  start_step(f, now);
  f.event("canary_step", f.canary_version + " takes "
                           + fixed(f.canary_share, 1) + "% (" + why + ")");
}

// Why the canary is out of bounds, or "".
std::string out_of_bounds(const fleet& f) {
  const auto& p = f.cfg.rollout;
  const auto& c = f.canary_window;
  const auto& s = f.stable_window;
  if (c.requests < p.min_requests)
    return "";
  if (c.error_rate() > s.error_rate() + p.max_error_rate)
    return "error rate " + fixed(c.error_rate()) + " against the stable "
           + fixed(s.error_rate()) + " (+" + fixed(p.max_error_rate)
           + " allowed)";
  // Medians need a few samples on both sides to mean anything.
  auto ratio_bad = [&](const std::vector<double>& cv,
                       const std::vector<double>& sv, double bound,
                       const char* what) -> std::string {
    if (cv.size() < 3 || sv.size() < 3)
      return "";
    const double cm = median(cv), sm = median(sv);
    if (sm > 0 && cm > bound * sm)
      return std::string(what) + " median " + fixed(cm) + " s against the "
             + "stable " + fixed(sm) + " s (x" + fixed(bound, 1)
             + " allowed)";
    return "";
  };
  auto why = ratio_bad(c.ttft_s, s.ttft_s, p.max_ttft_ratio, "TTFT");
  if (why.empty())
    why = ratio_bad(c.tpot_s, s.tpot_s, p.max_tpot_ratio, "TPOT");
  return why;
}

// Why no canary replica can take traffic, or "".
std::string canary_down(const fleet& f, clock::time_point now) {
  int64_t replicas = 0, down = 0;
  std::string last;
  for (const auto& r : f.replicas) {
    if (r->group != "canary" || r->role != replica_role::serving)
      continue;
    ++replicas;
    const bool unhealthy =
      r->probe_failures >= f.cfg.rollout.unhealthy_probes
      && r->ready_at != clock::time_point{};
    const bool broken = !r->breaker.would_allow(now);
    if (unhealthy || broken) {
      ++down;
      last = r->id + (unhealthy ? " failed "
                                    + std::to_string(r->probe_failures)
                                    + " health checks in a row"
                                : " has its circuit breaker open");
    }
  }
  return replicas > 0 && down == replicas ? last : "";
}

} // namespace

void judge_rollout(fleet& f, clock::time_point now) {
  if (f.phase != rollout_phase::running)
    return;
  std::string refused;
  if (auto why = canary_down(f, now); !why.empty())
    return (void)roll_back(f, "health: " + why, refused);
  if (auto why = out_of_bounds(f); !why.empty())
    return (void)roll_back(f, why, refused);
  const double held = std::chrono::duration<double>(now - f.step_started)
                        .count();
  if (held >= f.cfg.rollout.step_s
      && f.canary_window.requests >= f.cfg.rollout.min_requests)
    advance(f, now,
            std::to_string(f.canary_window.requests) + " requests, error rate "
              + fixed(f.canary_window.error_rate()) + ", TTFT median "
              + fixed(median(f.canary_window.ttft_s)) + " s against "
              + fixed(median(f.stable_window.ttft_s)) + " s");
}

bool promote(fleet& f, const std::string& why, std::string& refused) {
  if (f.phase != rollout_phase::running) {
    refused = std::string("no rollout is running (") + phase_name(f.phase)
              + ")";
    return false;
  }
  advance(f, clock::now(), why);
  return true;
}

bool roll_back(fleet& f, const std::string& why, std::string& refused) {
  if (f.phase != rollout_phase::running) {
    refused = std::string("no rollout is running (") + phase_name(f.phase)
              + ")";
    return false;
  }
  f.phase = rollout_phase::rolled_back;
  f.canary_share = 0;
  if (f.first_canary_failure != clock::time_point{})
    f.rollback_after_failure_s =
      std::chrono::duration<double>(clock::now() - f.first_canary_failure)
        .count();
  ++f.rollbacks;
  f.alert = true;
  f.alert_reason = why;
  for (auto& r : f.replicas)
    if (r->group == "canary" && r->role == replica_role::serving)
      r->role = replica_role::draining;
  f.event("rollback", f.canary_version + " rolled back to "
                        + f.stable_version + ": " + why);
  return true;
}

} // namespace tutti::gateway
