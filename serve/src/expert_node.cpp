#include "tutti/serve/expert_node.hpp"

#include <caf/actor_system.hpp>

#include <thread>

#include "tutti/runtime/system_config.hpp"
#include "tutti/serve/ep_ranks.hpp"
#include "tutti/serve/expert_loading.hpp"
#include "tutti/serve/serve_memory.hpp"
#include "tutti/serve/service.hpp"

namespace tutti::serve {

status run_expert_node(served_model& model, const service_limits& l,
                       const std::atomic<bool>& stop,
                       const std::function<void()>& ready) {
  if (!l.cluster.spans_daemons() || l.cluster.node_rank < 1)
    return status::error("an expert node is node 1 or above of serve.nodes");
  tutti_system_config config(system_options{true});
  caf::actor_system system{config};
  ep_options o;
  o.ranks = std::max<int64_t>(l.ep_ranks, 1);
  // Ranks holding sequences (data_parallel_attention) get their share of
  // the budget, as node 0's do; ep_ranks keeps one block for the others.
  o.blocks_per_rank =
    kv_cache::blocks_for_budget(geometry_of(model, l), l.kv_cache_bytes)
    / kv_budget_shares(l);
  o.block_tokens = l.kv_block_tokens;
  o.timeout = std::chrono::milliseconds(
    static_cast<int64_t>(l.step_timeout_s * 1000));
  o.cluster = l.cluster;
  o.layout = l.layout;
  o.racks = l.replan.rack;
  o.rack_aware_alltoall = l.rack_aware_alltoall;
  o.dispatch = l.dispatch;
  o.max_tier_restarts = l.expert_tier_restarts;
  o.guard_tls = l.guard_tls;
  if (!model.held_experts.empty() && !l.model_dir.empty())
    o.loader = std::make_shared<expert_loader>(model, l.model_dir);
  auto ranks = ep_ranks::start(system, model, o);
  if (!ranks)
    return ranks.error();
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  while (!ranks.value()->shards_up()) {
    if (stop)
      return {};
    // A rank that gave up joining has ended: follow() says why.
    if (std::chrono::steady_clock::now() >= deadline)
      return ranks.value()->follow(stop);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (ready)
    ready();
  // Node 0 hears the stop within a keep-alive, drains, then stops the
  // ranks: wait for that, and no longer.
  const auto grace = std::chrono::milliseconds(
    static_cast<int64_t>((l.drain_timeout_s + l.step_timeout_s) * 1000));
  return ranks.value()->follow(stop, grace);
}

} // namespace tutti::serve
