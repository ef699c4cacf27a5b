#pragma once
// The config of `tutti gateway`: one endpoint in front of replicas of
// `tutti serve`. A `gateway:` section with the front's limits, a `stable:`
// group of replicas and optionally a `canary:` group (a gray release:
// traffic share steps and the bounds it must stay within) and an
// `autoscale:` section for the stable group. Replicas are either running
// engines (replicas: [HOST:PORT, ...]) or started by the gateway
// (serve_config: FILE, count: N: `tutti serve FILE` children on loopback).
// Unknown keys and bad values are refused in one line naming the key.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::gateway {

struct replica_address {
  std::string host;
  uint16_t port = 0;
};

struct replica_group {
  std::string version; // the model version it serves (a label)
  std::vector<replica_address> replicas;
  std::string serve_config; // "" = replicas are given
  int64_t count = 0;        // replicas to start from serve_config
  bool given() const { return !version.empty(); }
};

struct canary_policy {
  std::vector<double> steps{1, 10, 50, 100}; // percent of traffic
  double step_s = 30;          // time at a step before it is judged
  int64_t min_requests = 20;   // canary requests a step needs to be judged
  double max_error_rate = 0.05; // above the stable version's
  double max_ttft_ratio = 2.0;  // canary's median over stable's
  double max_tpot_ratio = 2.0;
  int64_t unhealthy_probes = 3; // failed health checks in a row: roll back
};

struct autoscale_policy {
  bool enabled = false;
  int64_t min_replicas = 1, max_replicas = 1;
  int64_t warm_spares = 0;         // started, model loaded, not routed
  double scale_up_queue = 4;       // outstanding requests per replica
  double scale_up_ttft_s = 0;      // median TTFT over it scales up; 0 off
  double scale_up_after_s = 2;     // the bound held this long
  double scale_down_idle_s = 10;   // nothing outstanding this long
};

struct gateway_config {
  std::string host = "127.0.0.1";
  uint16_t port = 9000;
  double request_timeout_s = 300;
  double connect_timeout_s = 2;
  int64_t max_retries = 2;            // re-sends of a request not started
  int64_t max_in_flight = 256;        // the gateway's concurrency limit
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

expected<gateway_config> parse_gateway_config(const std::string& yaml_text,
                                              const std::string& source);
expected<gateway_config> load_gateway_config(const std::string& path);

} // namespace tutti::gateway
