#pragma once
// `tutti gateway`: one OpenAI-style endpoint in front of replicas of
// `tutti serve`. POST /v1/completions and /v1/chat/completions (JSON or
// server-sent events) go to a replica by least outstanding requests
// (fleet.hpp); a request that has sent no bytes to its client yet is
// retried on another replica (at most gateway.max_retries times) when its
// replica cannot be reached, refuses it (503, 429) or fails before the
// first token; one that has streamed
// tokens ends with an error event naming the replica. Answers carry
// X-Tutti-Replica and X-Tutti-Version. Also: /health, /ready (a replica is
// up), /metrics, /v1/models (a replica's), and the operator's
// GET /admin/status, GET /admin/events, POST /admin/promote,
// POST /admin/rollback (tutti rollout). A control actor probes every
// replica's /ready, reopens circuit breakers, judges the canary's steps
// (rollout.hpp) and scales the stable group (autoscale.hpp).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/gateway/fleet.hpp"
#include "tutti/config/gateway_config.hpp"

namespace tutti::gateway {

// Starts a replica of `serve_config` on loopback (the app runs `tutti
// serve`); the replica is up when its /ready answers.
struct launched {
  replica_address address;
  std::shared_ptr<launched_process> process;
};
using launcher = std::function<expected<launched>(const std::string&)>;

class gateway {
public:
  // Starts the replicas the config asks the gateway to start, the control
  // actor and the HTTP front on cfg.host:cfg.port (0: any free port).
  static expected<std::unique_ptr<gateway>> start(const gateway_config& cfg,
                                                  launcher launch);
  ~gateway();
  void stop();
  uint16_t port() const;
  fleet& state();

  struct impl;

private:
  explicit gateway(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

// JSON of the fleet for /admin/status and `tutti rollout status`.
std::string status_json(fleet& f);

} // namespace tutti::gateway
