#pragma once
// Node > 0 of a serving replica across daemons (serve.nodes): its rank of
// the group and that rank's expert shard, supervised as on node 0, taking
// part in every step node 0's rank opens (ep_ranks.hpp). No HTTP front, no
// sequences: node 0 holds the requests, their attention and KV cache.

#include <atomic>
#include <functional>

#include "tutti/base/status.hpp"
#include "tutti/serve/model.hpp"
#include "tutti/serve/service.hpp"

namespace tutti::serve {

// Joins the group (within step_timeout_s) and follows node 0 until it
// stops the replica (ok), fails or goes away (the reason). Once `stop` is
// set it asks node 0 to drain and stop the service, and waits for that up
// to drain_timeout_s + step_timeout_s (ok). `ready` is called once the
// rank has joined.
status run_expert_node(served_model& model, const service_limits& l,
                       const std::atomic<bool>& stop,
                       const std::function<void()>& ready = {});

} // namespace tutti::serve
