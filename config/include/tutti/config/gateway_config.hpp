#pragma once
// The config of `tutti gateway`: one endpoint in front of replicas of
// `tutti serve`. A `gateway:` section with the front's limits, a `stable:`
// group of replicas and optionally a `canary:` group (a gray release:
// traffic share steps and the bounds it must stay within) and an
// `autoscale:` section for the stable group. Replicas are either running
// engines (replicas: [HOST:PORT, ...]) or started by the gateway
// (serve_config: FILE, count: N: `tutti serve FILE` children on loopback).
// Each key is declared once below, as the job's are (field.hpp); checks
// across keys are in src/gateway_config.cpp.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/field.hpp"
#include "tutti/config/host_port.hpp"

namespace tutti::gateway {

using replica_address = host_port;

struct replica_group {
  std::string version; // the model version it serves (a label)
  std::vector<replica_address> replicas;
  std::string serve_config; // "" = replicas are given
  int64_t count = 0;        // replicas to start from serve_config
  bool given() const { return !version.empty(); }
};

template <class Visitor>
void visit_fields(Visitor& v, replica_group& c) {
  using namespace config;
  v.field("version", c.version,
          "the version the group serves (a label, e.g. medium@v1)", required,
          not_empty{"missing"});
  v.field("replicas", c.replicas, "running engines");
  v.field("serve_config", c.serve_config,
          "a serve config the gateway starts `count` `tutti serve` replicas "
          "of, on loopback ports");
  v.field("count", c.count, "replicas to start from serve_config", at_least(0),
          default_text{"1 with serve_config"});
}

// The canary's rollout: its keys sit in `canary:` beside the group's.
struct canary_policy {
  std::vector<double> steps{1, 10, 50, 100}; // percent of traffic
  double step_s = 30;           // time at a step before it is judged
  int64_t min_requests = 20;    // canary requests a step needs to be judged
  double max_error_rate = 0.05; // above the stable version's
  double max_ttft_ratio = 2.0;  // canary's median over stable's
  double max_tpot_ratio = 2.0;
  int64_t unhealthy_probes = 3; // failed health checks in a row: roll back
};

template <class Visitor>
void visit_fields(Visitor& v, canary_policy& c) {
  using namespace config;
  v.field("steps", c.steps, "rising percentages of traffic for the canary",
          not_empty{"must be a list of percentages"}, in_range(0, 100, "(]"));
  v.field("step_s", c.step_s, "a step's least time before it is judged",
          above(0));
  v.field("min_requests", c.min_requests,
          "canary requests a step needs before it is judged", at_least(1));
  v.field("max_error_rate", c.max_error_rate,
          "allowed excess of the canary's error rate over the stable "
          "version's",
          above(0));
  v.field("max_ttft_ratio", c.max_ttft_ratio,
          "allowed ratio of median TTFT, canary / stable", above(0));
  v.field("max_tpot_ratio", c.max_tpot_ratio,
          "allowed ratio of median TPOT, canary / stable", above(0));
  v.field("unhealthy_probes", c.unhealthy_probes,
          "failed health checks in a row of every canary replica that roll "
          "back",
          at_least(1));
}

// `enabled` is whether autoscale: was given.
struct autoscale_policy {
  bool enabled = false;
  int64_t min_replicas = 1, max_replicas = 1;
  int64_t warm_spares = 0;       // started, model loaded, not routed
  double scale_up_queue = 4;     // outstanding requests per replica
  double scale_up_ttft_s = 0;    // median TTFT over it scales up; 0 off
  double scale_up_after_s = 2;   // the bound held this long
  double scale_down_idle_s = 10; // nothing outstanding this long
};

template <class Visitor>
void visit_fields(Visitor& v, autoscale_policy& c) {
  using namespace config;
  v.field("min_replicas", c.min_replicas, "serving stable replicas, at least",
          at_least(1));
  v.field("max_replicas", c.max_replicas, "serving stable replicas, at most",
          at_least(1), default_text{"min_replicas"});
  v.field("warm_spares", c.warm_spares,
          "replicas kept started, model loaded, without traffic", at_least(0));
  v.field("scale_up_queue", c.scale_up_queue,
          "outstanding requests per serving replica that add one", above(0));
  v.field("scale_up_ttft_s", c.scale_up_ttft_s, "median TTFT that adds one",
          above(0), default_text{"off"});
  v.field("scale_up_after_s", c.scale_up_after_s,
          "how long the bound must hold", above(0));
  v.field("scale_down_idle_s", c.scale_down_idle_s,
          "nothing outstanding this long: the newest replica above "
          "min_replicas becomes a spare or stops",
          above(0));
}

struct gateway_config {
  std::string host = "127.0.0.1";
  uint16_t port = 9000;
  double request_timeout_s = 300;
  double connect_timeout_s = 2;
  int64_t max_retries = 2;     // re-sends of a request not started
  int64_t max_in_flight = 256; // the gateway's concurrency limit
  int64_t replica_max_outstanding = 64;
  double health_interval_s = 1;
  double health_timeout_s = 2;
  int64_t breaker_failures = 3; // failures in a row that open a breaker
  double breaker_open_s = 5;    // open this long, then one trial request
  int64_t http_threads = 0;     // 0: max_in_flight + 8
  std::string api_keys, metrics_web_config;
  // A policy file (security.policy's format, `tutti token issue`): its
  // tokens let non-loopback clients use /admin/ (operator role to promote
  // or roll back). "": /admin/ answers loopback clients only.
  std::string admin_policy;

  replica_group stable, canary;
  canary_policy rollout;
  autoscale_policy autoscale;
};

// The sections of a gateway file.
template <class Visitor>
void visit_fields(Visitor& v, gateway_config& c) {
  using namespace config;
  auto front = keys_of([&](auto& g) {
    host_port_ref listen{c.host, c.port};
    g.field("listen", listen,
            "where the gateway listens (`--listen` overrides; port 0 picks "
            "one)");
    g.field("request_timeout_s", c.request_timeout_s,
            "arrival to the last byte; then 504 (or an error event)", above(0));
    g.field("connect_timeout_s", c.connect_timeout_s, "connecting to a replica",
            above(0));
    g.field("max_retries", c.max_retries,
            "re-sends of a request not yet started", at_least(0));
    g.field("max_in_flight", c.max_in_flight,
            "requests in the gateway; more get 429", at_least(1));
    g.field("replica_max_outstanding", c.replica_max_outstanding,
            "requests at one replica; all full: 429", at_least(1));
    g.field("health_interval_s", c.health_interval_s,
            "between `/ready` probes of every replica", above(0));
    g.field("health_timeout_s", c.health_timeout_s, "a probe's time limit",
            above(0));
    g.field("breaker_failures", c.breaker_failures,
            "failures in a row that open a replica's circuit breaker",
            at_least(1));
    g.field("breaker_open_s", c.breaker_open_s,
            "how long a breaker stays open before one trial request", above(0));
    g.field("http_threads", c.http_threads, "connections served at once",
            at_least(0, "0 = max_in_flight + 8"));
    g.field("api_keys", c.api_keys, "as serve.api_keys",
            default_text{"none: open"});
    g.field("metrics_web_config", c.metrics_web_config,
            "as serve.metrics_web_config; its basic auth guards `/metrics` "
            "only",
            default_text{"none: open"});
    g.field("admin_policy", c.admin_policy,
            "a policy file whose tokens let non-loopback clients use "
            "`/admin/` (operator to promote or roll back)",
            default_text{"loopback clients only"});
  });
  v.field("gateway", front, "the endpoint: where it listens, its limits");
  v.field("stable", c.stable, "the replicas of the stable version", required);
  auto canary = keys_of([&](auto& g) {
    visit_fields(g, c.canary);
    visit_fields(g, c.rollout);
  });
  v.field("canary", canary,
          "a gray release: the canary version's replicas and the bounds its "
          "traffic steps must stay within (given: on)");
  v.field("autoscale", c.autoscale,
          "scale the stable group on queue length, with warm spares; needs "
          "stable.serve_config (given: on)");
}

// The config, or one line naming the key and why (prefixed with `source`).
expected<gateway_config> parse_gateway_config(const std::string& yaml_text,
                                              const std::string& source);
expected<gateway_config> load_gateway_config(const std::string& path);

} // namespace tutti::gateway
