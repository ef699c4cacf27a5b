#pragma once
// The ranks of one expert-parallel serving replica, in this process, as
// supervised actors: a rank actor per device holding attention and its own
// paged KV cache, and each rank's expert shard (the experts its layout puts
// there: contiguous blocks as in training, a plan, offload; replaceable
// between steps) under one supervisor. A step goes to
// every rank at once, each with the chunks of the sequences it holds; the
// ranks exchange expert rows over their in-process communicator. An expert
// shard that fails is restarted by the supervisor and its rank resends the
// work, so the step's result is unchanged.
//
// Across daemons (ep_cluster, `ranks` a daemon: daemon n holds ranks
// n x ranks .. n x ranks + ranks - 1 of the group): node 0's first rank
// holds the sequences, their attention and KV cache; every rank holds its
// share of the experts; the ranks exchange expert rows over Gloo, meeting
// through a rendezvous actor node 0 publishes (as a training job's ranks
// meet through the coordinator). Node 0's first rank leads: it opens each
// step with a small collective every other rank (node 0's others too)
// waits on (step, keep-alive while idle, stop), then every rank takes part
// in each layer's exchange.
// With data_parallel_attention every daemon's rank holds sequences too
// (attention data parallel, the experts expert parallel, as DeepSeek's
// serving and SGLang's --enable-dp-attention run): node 0's scheduler
// allocates their blocks in caches of its own that hold no keys or values,
// node 0's rank sends each step's chunks to their daemons before the step
// and gathers the wanted rows' logits after it.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/runtime/basp_guard.hpp"
#include "tutti/config/serve_limits.hpp"
#include "tutti/protocol/messages.hpp"
#include "tutti/serve/engine.hpp"
#include "tutti/serve/expert_layout.hpp"
#include "tutti/serve/kv_cache.hpp"
#include "tutti/serve/link_bytes.hpp"
#include "tutti/serve/model.hpp"

namespace caf {
class actor;
class actor_system;
} // namespace caf

namespace tutti::serve {

class layout_cell;   // ep_actors.hpp
class expert_loader; // expert_loading.hpp

struct ep_options {
  int64_t ranks = 1; // in this process (across daemons: each daemon's)
  int64_t blocks_per_rank = 0;
  int64_t block_tokens = 16;
  std::chrono::milliseconds timeout{30000}; // a step, a collective
  int64_t max_restarts = 3;                 // of the shards within period
  std::chrono::milliseconds restart_period{60000};
  // Restarts of the whole expert tier (the shards' supervisor, after it
  // gave up) within restart_period; one more and the replica has failed.
  int64_t max_tier_restarts = 10;
  ep_cluster cluster; // empty: every rank in this process
  // Where the experts live (serve_layout.hpp); null: contiguous.
  std::shared_ptr<const expert_layout> layout;
  // Each rank's rack in the group (serve.racks); empty: one rack. With
  // rack_aware_alltoall, dispatch and combine go through one relay per
  // rack (moe/token_exchange.hpp) instead of straight to each rank.
  std::vector<int32_t> racks;
  bool rack_aware_alltoall = false;
  // The rows the dispatch sends (serve.dispatch_dtype).
  dispatch_dtype dispatch = dispatch_dtype::fp32;
  // Across daemons: mutual TLS on node 0's rendezvous (service_limits).
  basp_guard::tls_options guard_tls;
  // A daemon holding only its own experts: loads those a new layout
  // moves to its ranks before adopting it; null: every expert is held.
  std::shared_ptr<expert_loader> loader;
};

class ep_ranks {
public:
  // Spawns the actors in `sys`; `model` and `sys` outlive the ranks.
  // Refuses a rank count that does not divide the experts (contiguous) or
  // a layout of another shape.
  static expected<std::unique_ptr<ep_ranks>> start(caf::actor_system& sys,
                                                   const served_model& model,
                                                   const ep_options& options);
  ~ep_ranks(); // stops the ranks and the shards

  // Ranks (and expert shards) in this process.
  int64_t size() const { return static_cast<int64_t>(caches_.size()); }
  // Ranks that hold sequences: this process's (across daemons node 0's
  // leader alone), and with data_parallel_attention on node 0 every other
  // rank of the group (rank r's cache there only tracks its blocks).
  int64_t sequence_ranks() const {
    return driven_ + static_cast<int64_t>(remote_caches_.size());
  }
  kv_cache& cache(int64_t rank) {
    return rank < driven_ ? *caches_[rank] : *remote_caches_[rank - driven_];
  }
  const kv_cache& cache(int64_t rank) const {
    return rank < driven_ ? *caches_[rank] : *remote_caches_[rank - driven_];
  }

  // One step: each chunk on the rank its `rank` names (of
  // sequence_ranks()); logits of the wanted rows in batch order, as
  // engine::forward.
  status forward(const std::vector<seq_chunk>& batch,
                 std::vector<float>& logits);

  // Tokens routed to each expert, summed over the ranks.
  const std::vector<int64_t>& expert_activations() const {
    return activations_;
  }
  // By the all-to-alls of the ranks given steps (across daemons node 0's
  // leader; the others' are in exchanged_link_bytes).
  int64_t exchanged_bytes() const;
  // Bytes of experts this process loaded for new layouts (ep_options).
  int64_t expert_loaded_bytes() const;
  // The same by link class, over the whole group: across daemons node 0
  // adds the other daemons' counts as of their last step (they travel
  // with each step's header and the idle keep-alive).
  link_bytes exchanged_link_bytes() const;
  // Where the experts live now.
  std::shared_ptr<const expert_layout> layout() const;
  // Moves experts: the next step, and every one after, runs on `x`
  // (across daemons node 0 sends it to the others first). Call between
  // steps, from the thread that calls forward(). Refuses a layout of
  // another shape or with an offload (fixed at the start).
  status set_layout(std::shared_ptr<const expert_layout> x);
  // Tokens routed to each expert by the sequences of rank r of this
  // process, [layer * experts + e], since the start.
  const std::vector<int64_t>& rank_activations(int64_t r) const {
    return rank_activations_[r];
  }
  // Offload: rows (token, layer) that chose an offloaded expert and all
  // routed rows, since the start; seconds the steps since the last call
  // waited on offloaded experts (per step the longest of the ranks' waits).
  int64_t offloaded_rows() const { return offloaded_rows_; }
  int64_t routed_rows() const { return routed_rows_; }
  double take_offload_wait_s() { return std::exchange(offload_wait_s_, 0.0); }
  int64_t shard_restarts() const;  // survived by the ranks
  // Restarts of the expert tier (its supervisor gave up, the tier started
  // it again), and why the tier itself gave up: "" while it has not. A
  // failed replica serves no more steps.
  int64_t tier_restarts() const;
  bool failed() const;
  std::string failure() const;
  // Whether every rank has joined its group and its shard is running
  // (readiness).
  bool shards_up();
  // Node > 0 of a cluster: blocks until its rank ends (node 0 stopped,
  // failed or went away: the reason, or ok for a stop). Once `stop` is set
  // it asks node 0 to stop the service (stop_wanted there), which drains
  // it and ends every rank; past `grace` it returns ok regardless.
  status follow(const std::atomic<bool>& stop,
                std::chrono::milliseconds grace = {});
  // Node 0 of a cluster: another daemon asked the service to stop.
  bool stop_wanted() const;
  // Arms `fault` in rank r's expert shard: it fails on its next task.
  status inject_fault(int64_t rank, const std::string& fault);
  // Kills rank r's expert shard actor now (chaos kill_expert): its
  // supervisor restarts it and the rank resends the task it had out.
  status kill_shard(int64_t rank);
  // Each shard as its supervisor sees it (id expert_shard/R, running,
  // restarts); empty if the supervisor did not answer.
  std::vector<child_status> shard_states();

private:
  struct actors;
  ep_ranks() = default;
  expected<caf::actor> shard_of(int64_t rank);

  const served_model* model_ = nullptr;
  ep_options options_;
  // This process's first rank in the group; the ranks forward() gives
  // steps to (the others follow node 0's leader).
  int64_t first_ = 0, driven_ = 0;
  std::vector<std::unique_ptr<kv_cache>> caches_;
  std::vector<std::unique_ptr<kv_cache>> remote_caches_; // group ranks 1..
  std::unique_ptr<actors> actors_;
  std::vector<int64_t> activations_;
  std::vector<int64_t> bytes_, restarts_;
  std::vector<link_bytes> link_bytes_; // per rank of this process
  std::shared_ptr<layout_cell> layout_;
  std::vector<std::vector<int64_t>> rank_activations_;
  int64_t offloaded_rows_ = 0, routed_rows_ = 0;
  double offload_wait_s_ = 0.0;
};

} // namespace tutti::serve
