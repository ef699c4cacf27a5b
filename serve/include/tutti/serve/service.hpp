#pragma once
// The serving engine of one replica, as actors: requests come in through
// submit() from any thread (the HTTP front's) as messages to the replica's
// scheduler actor, which runs the scheduler step by step (detached: every
// step blocks), and each request's tokens come back through its
// request_stream. With ep_ranks >= 1 the steps run on supervised rank and
// expert shard actors (ep_ranks.hpp); with 0, in an engine on the
// scheduler actor's own thread.

#include <caf/actor.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/serve_limits.hpp"
#include "tutti/runtime/basp_guard.hpp"
#include "tutti/serve/ep_ranks.hpp"
#include "tutti/serve/live_replan.hpp"
#include "tutti/serve/model.hpp"
#include "tutti/serve/request_affinity.hpp"
#include "tutti/serve/scheduler.hpp"
#include "tutti/serve/serve_metrics.hpp"

namespace caf {
class actor_system;
class blocking_actor;
} // namespace caf

namespace tutti::serve {

// serve_limits (the config's keys) and what is built from the model and
// the files the config names when the service starts.
struct service_limits : serve_limits {
  service_limits() = default;
  explicit service_limits(const serve_limits& keys) : serve_limits(keys) {}

  // Where the experts live (serve_layout.hpp); null: contiguous.
  std::shared_ptr<const expert_layout> layout;
  // The ranks' racks: the cross-rack share measured, and experts moved
  // by rack above its bound (live_replan.hpp).
  replan_config replan;
  // Where a request starts (serve.rack_affinity); null: the rank with the
  // most free KV blocks.
  std::shared_ptr<const request_affinity> affinity;
  // Across daemons with security.tls: the guard's mutual TLS on node 0's
  // rendezvous (runtime/node_tls.hpp; the dialer is installed with it).
  basp_guard::tls_options guard_tls;
  // Where the model was loaded from: a daemon holding only its own
  // experts (served_model::held_experts) reads there those a new layout
  // moves to it (expert_loading.hpp).
  std::string model_dir;
};

// The KV cache's blocks for `m` under `l` (a daemon's rank holds
// kv_cache_bytes / ep_ranks of them).
kv_geometry geometry_of(const served_model& m, const service_limits& l);

// A request's events, in order, for the thread that waits on it.
class request_stream {
public:
  // The next event; false if none came within `wait`.
  bool next(request_event& ev, clock::duration wait);
  void push(request_event ev);

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<request_event> events_;
};

// Why a request was not taken: the HTTP status and OpenAI's error type.
struct refusal {
  int http_status = 0; // 0: accepted
  std::string type;    // invalid_request_error, ...
  std::string message;
  std::string param; // the request field at fault, if one is
};

class service {
public:
  // Sizes the KV cache from the budget; refuses limits it cannot honour.
  static expected<std::unique_ptr<service>> create(served_model model,
                                                   const service_limits& l);
  ~service();

  void start(); // spawns the scheduler actor; ready() from then on
  void stop();  // ends every request (cancelled) and the scheduler actor
  // A graceful stop's first half: takes no more requests (503) and waits,
  // up to `grace`, until those taken have finished; true if they all did.
  // stop() then ends what is left.
  bool drain(std::chrono::milliseconds grace);
  // Running and not failed: submissions are taken.
  bool ready() const;
  // Readiness: running, and (expert parallel) every expert shard up.
  bool shards_up();
  // Why the replica can serve no more ("" while it can): its expert tier
  // gave up past every restart budget. The process should end non-zero
  // so that what runs it (systemd, Kubernetes, the gateway) replaces it.
  std::string failure() const;
  // Across daemons, on node 0: another daemon got a stop signal and asks
  // for the service to drain and stop.
  bool stop_wanted() const;

  struct submission {
    uint64_t id = 0;
    std::shared_ptr<request_stream> stream;
    refusal refused;
  };
  // r's prompt, max_tokens, sampling and stop are filled in; the service
  // sets its id, times and sink.
  submission submit(std::unique_ptr<request> r);
  // Ends a request (client gone): its blocks are freed at the next step.
  void cancel(uint64_t id);

  const served_model& model() const { return model_; }
  const service_limits& limits() const { return limits_; }
  serve_metrics& metrics() { return metrics_; }
  int64_t kv_blocks() const { return scheduler_->total_blocks(); }
  // Requests preempted and recomputed since the start (scheduler thread's
  // count; read when idle).
  int64_t preemptions() const { return scheduler_->preemptions(); }
  // serve.rack_affinity: requests that started in their prompt's rack, and
  // those that did not (its ranks too full).
  int64_t placed_by_affinity() const {
    return scheduler_->placed_by_affinity();
  }
  int64_t placed_elsewhere() const { return scheduler_->placed_elsewhere(); }
  // The expert-parallel ranks; null with ep_ranks 0.
  ep_ranks* ranks() { return ranks_.get(); }

private:
  service(served_model model, const service_limits& l);
  status build(int64_t blocks);
  void loop(caf::blocking_actor* self);
  void publish_gauges();

  served_model model_;
  service_limits limits_;
  struct actor_runtime; // the replica's actor system
  std::unique_ptr<actor_runtime> runtime_;
  std::unique_ptr<kv_cache> cache_; // ep_ranks 0
  std::unique_ptr<engine> engine_;  // ep_ranks 0
  std::unique_ptr<ep_ranks> ranks_; // ep_ranks >= 1
  std::unique_ptr<live_replanner> replanner_; // with racks
  serve_metrics metrics_;
  std::unique_ptr<scheduler> scheduler_;

  std::mutex mutex_; // submissions against the queue limit; start and stop
  int64_t in_mailbox_ = 0; // submitted, not yet taken by the scheduler
  int64_t queued_ = 0;     // the scheduler's waiting, as of the last step
  int64_t running_ = 0;    // and its running
  uint64_t next_id_ = 1;
  std::atomic<bool> ready_{false};
  caf::actor scheduler_actor_;
};

} // namespace tutti::serve
