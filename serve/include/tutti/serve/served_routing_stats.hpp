#pragma once
// The routing statistics of a serving replica, from its /metrics text
// (tutti_serve_expert_tokens_total{layer, expert}): the load table of
// placement's routing_stats, as `tutti experts stats HOST:PORT` writes it
// for the planner and for serve.offload. Serving counts (token, slot)
// pairs per expert and no co-activation: top_k is 1, tokens the pairs of a
// layer, and the co-activation and transitions are zeros.

#include <string>

#include "tutti/base/status.hpp"
#include "tutti/placement/routing_stats.hpp"

namespace tutti::serve {

expected<placement::routing_stats> routing_stats_from_metrics(
  const std::string& prometheus_text);

} // namespace tutti::serve
