// The gateway's parts without sockets: its config (bad keys named), the
// circuit breaker (opens, half-open trial, closes), least-outstanding
// leases with the canary's share by credit, and the rollout's judgement
// (steps, rollback on error rate, TTFT or health, with an event and the
// alert).

#include <catch2/catch.hpp>

#include "tutti/gateway/fleet.hpp"
#include "tutti/config/gateway_config.hpp"
#include "tutti/gateway/rollout.hpp"

using namespace tutti;
using namespace tutti::gateway;

namespace {

// Two stable replicas, and `extra`.
gateway_config fleet_config(const std::string& extra = "") {
  auto c = parse_gateway_config(
    "stable:\n  version: m@1\n  replicas: [127.0.0.1:1001, 127.0.0.1:1002]\n"
      + extra,
    "t");
  REQUIRE(c.ok());
  return c.value();
}

std::shared_ptr<replica> add(fleet& f, const std::string& id,
                             const std::string& group) {
  auto r = std::make_shared<replica>(id, group, group == "canary" ? "m@2"
                                                                  : "m@1",
                                     replica_address{"127.0.0.1", 1}, f.cfg);
  r->healthy = true;
  r->ready_at = clock::now();
  f.add(r);
  return r;
}

bool has_event(fleet& f, const std::string& kind) {
  for (const auto& e : f.events)
    if (e.kind == kind)
      return true;
  return false;
}

const std::string canary =
  "canary:\n  version: m@2\n  replicas: [127.0.0.1:1003]\n"
  "  steps: [10, 50, 100]\n  step_s: 0.01\n  min_requests: 5\n"
  "  max_error_rate: 0.1\n  max_ttft_ratio: 2\n";

} // namespace

TEST_CASE("gateway configs are checked key by key", "[unit]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
    {"stable:\n  version: a\n", "stable.replicas"},
    {"stable:\n  replicas: [h:1]\n", "stable.version"},
    {"stable:\n  version: a\n  replicas: [nowhere]\n", "stable.replicas[0]"},
    {"stable:\n  version: a\n  replicas: [h:1]\ngateway:\n  retries: 2\n",
     "gateway.retries"},
    {"stable:\n  version: a\n  replicas: [h:1]\ngateway:\n"
     "  max_in_flight: 0\n",
     "gateway.max_in_flight"},
    {"stable:\n  version: a\n  replicas: [h:1]\ncanary:\n  version: b\n"
     "  replicas: [h:2]\n  steps: [10, 5]\n",
     "canary.steps"},
    {"stable:\n  version: a\n  replicas: [h:1]\ncanary:\n  version: a\n"
     "  replicas: [h:2]\n",
     "canary.version"},
    {"stable:\n  version: a\n  replicas: [h:1]\nautoscale:\n"
     "  max_replicas: 2\n",
     "autoscale"},
    {"stable:\n  version: a\n  serve_config: s.yaml\nautoscale:\n"
     "  min_replicas: 3\n  max_replicas: 2\n",
     "autoscale.max_replicas"},
    // Unknown keys at every level, and values of the wrong kind.
    {"stable:\n  version: a\n  replicas: [h:1]\ngateways: {}\n", "gateways"},
    {"stable:\n  version: a\n  replicas: [h:1]\n  steps: [1]\n",
     "stable.steps"},
    {"stable:\n  version: a\n  replicas: [h:1]\ncanary:\n  version: b\n"
     "  replicas: [h:2]\n  step: 3\n",
     "canary.step"},
    {"stable:\n  version: a\n  serve_config: s.yaml\nautoscale:\n"
     "  max: 3\n",
     "autoscale.max"},
    {"stable:\n  version: a\n  replicas: [h:0]\n", "stable.replicas[0]"},
    {"stable:\n  version: a\n  replicas: h:1\n", "stable.replicas"},
    {"stable:\n  version: a\n  replicas: [h:1]\ngateway:\n"
     "  listen: nowhere\n",
     "gateway.listen"},
    {"stable:\n  version: a\n  replicas: [h:1]\ngateway:\n"
     "  connect_timeout_s: soon\n",
     "gateway.connect_timeout_s"},
    {"stable:\n  version: a\n  serve_config: s.yaml\n  count: -1\n",
     "stable.count"},
    {"stable:\n  version: a\n  replicas: [h:1]\n  count: 2\n",
     "stable.serve_config"},
    {"gateway:\n  max_retries: 1\n", "stable"},
  };
  for (const auto& [text, key] : bad) {
    auto c = parse_gateway_config(text, "cfg.yaml");
    INFO(text);
    REQUIRE_FALSE(c.ok());
    CHECK(c.message().rfind("cfg.yaml: " + key, 0) == 0);
    CHECK(c.message().find('\n') == std::string::npos);
  }
  auto good = fleet_config(canary);
  CHECK(good.stable.replicas.size() == 2);
  CHECK(good.rollout.steps == std::vector<double>{10, 50, 100});
}

TEST_CASE("gateway configs: defaults, and the defaults that depend on what "
          "is given",
          "[unit]") {
  const gateway_config d;
  auto c = fleet_config();
  CHECK(c.host == "127.0.0.1");
  CHECK(c.port == 9000);
  CHECK(c.max_retries == d.max_retries);
  CHECK(c.max_in_flight == 256);
  CHECK(c.stable.version == "m@1");
  CHECK(c.stable.replicas[1].host == "127.0.0.1");
  CHECK(c.stable.replicas[1].port == 1002);
  CHECK(c.stable.count == 0);
  CHECK_FALSE(c.canary.given());
  CHECK_FALSE(c.autoscale.enabled);
  CHECK(c.rollout.steps == std::vector<double>{1, 10, 50, 100});

  auto started = parse_gateway_config(
    "gateway:\n  listen: 0.0.0.0:0\n  breaker_open_s: 0.5\n"
    "stable:\n  version: a\n  serve_config: s.yaml\n"
    "canary:\n  version: b\n  serve_config: t.yaml\n  count: 0\n"
    "  replicas: [h:3]\n"
    "autoscale:\n  min_replicas: 2\n  warm_spares: 1\n",
    "cfg.yaml");
  INFO(started.message());
  REQUIRE(started.ok());
  const auto& s = started.value();
  CHECK(s.host == "0.0.0.0");
  CHECK(s.port == 0);
  CHECK(s.breaker_open_s == 0.5);
  CHECK(s.stable.count == 1); // serve_config without count: one
  CHECK(s.canary.given());
  CHECK(s.canary.count == 0); // as given
  CHECK(s.autoscale.enabled);
  CHECK(s.autoscale.min_replicas == 2);
  CHECK(s.autoscale.max_replicas == 2); // min_replicas, not given
  CHECK(s.autoscale.warm_spares == 1);
}

TEST_CASE("a circuit breaker opens, lets one trial through, closes",
          "[unit]") {
  circuit_breaker b(2, std::chrono::milliseconds(50));
  const auto t0 = clock::now();
  CHECK(b.allow(t0));
  CHECK_FALSE(b.failed(t0));
  CHECK(b.failed(t0)); // the second in a row opens it
  CHECK_FALSE(b.allow(t0));
  const auto later = t0 + std::chrono::milliseconds(60);
  CHECK(b.allow(later));       // half-open: the trial
  CHECK_FALSE(b.allow(later)); // and no second one
  CHECK(b.failed(later));      // the trial failed: open again
  CHECK_FALSE(b.allow(later));
  const auto again = later + std::chrono::milliseconds(60);
  CHECK(b.allow(again));
  b.succeeded();
  CHECK(b.current() == circuit_breaker::state::closed);
  CHECK(b.allow(again));
  CHECK(b.times_opened() == 2);
}

TEST_CASE("leases go to the least outstanding replica, the canary gets its "
          "share",
          "[unit]") {
  fleet f(fleet_config());
  auto a = add(f, "a", "stable");
  auto b = add(f, "b", "stable");
  bool saturated = false;
  auto r1 = f.lease({}, saturated);
  auto r2 = f.lease({}, saturated);
  CHECK(r1 != r2); // one each
  f.release(r1, {});
  auto r3 = f.lease({}, saturated);
  CHECK(r3 == r1); // the one with nothing outstanding
  // Not one already tried, not an unhealthy one.
  b->healthy = false;
  CHECK(f.lease({"a"}, saturated) == nullptr);
  b->healthy = true;

  fleet g(fleet_config(canary));
  add(g, "s", "stable");
  auto c = add(g, "c", "canary");
  int to_canary = 0;
  for (int i = 0; i < 100; ++i) {
    auto r = g.lease({}, saturated);
    REQUIRE(r);
    to_canary += r == c;
    g.release(r, {});
  }
  CHECK(to_canary == 10); // steps[0] = 10%
}

TEST_CASE("the rollout promotes a healthy canary step by step", "[unit]") {
  fleet f(fleet_config(canary));
  add(f, "s", "stable");
  add(f, "c", "canary");
  std::lock_guard<std::mutex> lock(f.mutex);
  CHECK(f.canary_share == 10);
  auto t = clock::now();
  for (double next : {50.0, 100.0}) {
    for (int i = 0; i < 5; ++i) {
      f.canary_window.requests++, f.canary_window.ttft_s.push_back(0.01);
      f.stable_window.requests++, f.stable_window.ttft_s.push_back(0.01);
    }
    judge_rollout(f, t += std::chrono::seconds(1));
    CHECK(f.canary_share == next);
  }
  for (int i = 0; i < 5; ++i)
    f.canary_window.requests++;
  judge_rollout(f, t += std::chrono::seconds(1));
  CHECK(f.phase == rollout_phase::promoted);
  CHECK(f.stable_version == "m@2");
  CHECK(f.replicas[0]->role == replica_role::draining);
  CHECK(f.replicas[1]->group == "stable");
  CHECK_FALSE(f.alert);
  CHECK(has_event(f, "promoted"));
}

TEST_CASE("the rollout returns to stable on errors, latency or health",
          "[unit]") {
  SECTION("error rate") {
    fleet f(fleet_config(canary));
    add(f, "s", "stable");
    add(f, "c", "canary");
    std::lock_guard<std::mutex> lock(f.mutex);
    f.canary_window.requests = 5, f.canary_window.errors = 2;
    f.stable_window.requests = 50;
    judge_rollout(f, clock::now());
    CHECK(f.phase == rollout_phase::rolled_back);
    CHECK(f.canary_share == 0);
    CHECK(f.alert);
    CHECK(f.alert_reason.find("error rate") != std::string::npos);
    CHECK(has_event(f, "rollback"));
    CHECK(f.replicas[1]->role == replica_role::draining);
  }
  SECTION("TTFT") {
    fleet f(fleet_config(canary));
    add(f, "s", "stable");
    add(f, "c", "canary");
    std::lock_guard<std::mutex> lock(f.mutex);
    for (int i = 0; i < 5; ++i) {
      f.canary_window.requests++, f.canary_window.ttft_s.push_back(0.5);
      f.stable_window.requests++, f.stable_window.ttft_s.push_back(0.1);
    }
    judge_rollout(f, clock::now());
    CHECK(f.phase == rollout_phase::rolled_back);
    CHECK(f.alert_reason.find("TTFT") != std::string::npos);
  }
  SECTION("health") {
    fleet f(fleet_config(canary));
    add(f, "s", "stable");
    auto c = add(f, "c", "canary");
    std::lock_guard<std::mutex> lock(f.mutex);
    c->healthy = false;
    c->probe_failures = 3;
    judge_rollout(f, clock::now());
    CHECK(f.phase == rollout_phase::rolled_back);
    CHECK(f.alert_reason.find("health") != std::string::npos);
  }
  SECTION("the operator") {
    fleet f(fleet_config(canary));
    std::lock_guard<std::mutex> lock(f.mutex);
    std::string refused;
    CHECK(roll_back(f, "operator", refused));
    CHECK_FALSE(roll_back(f, "operator", refused));
    CHECK(refused.find("no rollout") != std::string::npos);
  }
}
