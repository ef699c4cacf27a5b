#pragma once
// The ranks of one expert-parallel serving replica, in this process, as
// supervised actors: a rank actor per device holding attention and its own
// paged KV cache, and each rank's expert shard (its experts, spread over
// the ranks as training spreads them) under one supervisor. A step goes to
// every rank at once, each with the chunks of the sequences it holds; the
// ranks exchange expert rows over their in-process communicator. An expert
// shard that fails is restarted by the supervisor and its rank resends the
// work, so the step's result is unchanged.
//
// Across daemons (ep_cluster, one rank per daemon): node 0's rank holds
// the sequences, their attention and KV cache; every node's rank holds its
// share of the experts; the ranks exchange expert rows over Gloo, meeting
// through a rendezvous actor node 0 publishes (as a training job's ranks
// meet through the coordinator). Node 0's rank opens each step with a
// one-number collective the other nodes' ranks wait on (step, keep-alive
// while idle, stop), then every rank takes part in each layer's exchange.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/serve/engine.hpp"
#include "tutti/serve/kv_cache.hpp"
#include "tutti/serve/model.hpp"

namespace caf {
class actor_system;
}

namespace tutti::serve {

// A serving replica across daemons: `nodes` are their addresses (node 0
// first, the one with the HTTP front); each runs one rank.
struct ep_cluster {
  std::vector<std::string> nodes;
  int64_t node_rank = 0;
  uint16_t rendezvous_port = 0; // node 0's rendezvous actor listens here
  bool spans_daemons() const { return nodes.size() > 1; }
};

struct ep_options {
  int64_t ranks = 1; // in this process; 1 with a cluster
  int64_t blocks_per_rank = 0;
  int64_t block_tokens = 16;
  std::chrono::milliseconds timeout{30000}; // a step, a collective
  int64_t max_restarts = 3;                 // per shard within period
  std::chrono::milliseconds restart_period{60000};
  ep_cluster cluster; // empty: every rank in this process
};

class ep_ranks {
public:
  // Spawns the actors in `sys`; `model` and `sys` outlive the ranks.
  // Refuses a rank count that does not divide the experts.
  static expected<std::unique_ptr<ep_ranks>> start(caf::actor_system& sys,
                                                   const served_model& model,
                                                   const ep_options& options);
  ~ep_ranks(); // stops the ranks and the shards

  int64_t size() const { return static_cast<int64_t>(caches_.size()); }
  kv_cache& cache(int64_t rank) { return *caches_[rank]; }
  const kv_cache& cache(int64_t rank) const { return *caches_[rank]; }

  // One step: each chunk on the rank its `rank` names; logits of the
  // wanted rows in batch order, as engine::forward.
  status forward(const std::vector<seq_chunk>& batch,
                 std::vector<float>& logits);

  // Tokens routed to each expert, summed over the ranks.
  const std::vector<int64_t>& expert_activations() const {
    return activations_;
  }
  int64_t exchanged_bytes() const; // by every rank's all-to-alls
  int64_t shard_restarts() const;  // survived by the ranks
  // Whether every rank has joined its group and its shard is running
  // (readiness).
  bool shards_up();
  // Node > 0 of a cluster: blocks until its rank ends (node 0 stopped,
  // failed or went away: the reason, or ok for a stop) or `stop` is set.
  status follow(const std::atomic<bool>& stop);
  // Arms `fault` in rank r's expert shard: it fails on its next task.
  status inject_fault(int64_t rank, const std::string& fault);

private:
  struct actors;
  ep_ranks() = default;

  const served_model* model_ = nullptr;
  ep_options options_;
  std::vector<std::unique_ptr<kv_cache>> caches_;
  std::unique_ptr<actors> actors_;
  std::vector<int64_t> activations_;
  std::vector<int64_t> bytes_, restarts_;
};

} // namespace tutti::serve
