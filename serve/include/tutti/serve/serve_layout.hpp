#pragma once
// The expert layout a serving replica starts with, from its config:
// serve.placement's plan file (the format `tutti placement plan` writes and
// training's moe_config.placement reads), checked against the model's
// layers and experts and the replica's ranks, then serve.offload applied
// with the load of its statistics file. Every daemon of a replica reads
// the same files and computes the same layout.

#include <memory>

#include "tutti/base/status.hpp"
#include "tutti/serve/expert_layout.hpp"
#include "tutti/serve/live_replan.hpp"
#include "tutti/serve/model.hpp"
#include "tutti/serve/request_affinity.hpp"
#include "tutti/config/serve_config.hpp"

namespace tutti::serve {

// Null when neither key is set (contiguous, as before). Errors name the
// key: serve.placement, serve.offload.stats, serve.offload.rank, ...
// Needs c.limits.ep_ranks set (or serve.nodes across daemons).
expected<std::shared_ptr<const expert_layout>> layout_for(
  const serve_config& c, const model_shape& shape);

// serve.racks and serve.replan for the replica's ranks (errors name
// serve.racks); off without racks, measuring only without replan.
expected<replan_config> replan_for(const serve_config& c);

// serve.rack_affinity: the placement's token_experts by the ranks' racks;
// null when off.
expected<std::shared_ptr<const request_affinity>> affinity_for(
  const serve_config& c);

} // namespace tutti::serve
