#pragma once
// The part of `tutti serve`'s config that bounds the service: the
// scheduler's batch, the queue, request sizes and times, the KV cache, and
// where the expert-parallel ranks run. Plain values (no CAF, no model): the
// serving engine takes them as they are (serve/service.hpp's service_limits
// adds what is built at start from the model and the files the config
// names). Their keys are declared with the rest of serve: in
// serve_config.hpp.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/config/enums.hpp"

namespace tutti::serve {

// The scheduler's bounds on one engine step.
struct batch_limits {
  int64_t max_batch_tokens = 256; // rows per engine step
  int64_t max_sequences = 32;     // requests running at once
  bool prefix_caching = true;     // share cached blocks of equal prefixes
};

// A serving replica across daemons: `nodes` are their addresses (node 0
// first, the one with the HTTP front); each runs serve.ep_size ranks.
struct ep_cluster {
  std::vector<std::string> nodes;
  // Not a key: this daemon's place in `nodes` (tuttid --node-rank).
  int64_t node_rank = 0;
  uint16_t rendezvous_port = 0; // node 0's rendezvous actor listens here
  bool data_parallel_attention = false; // every daemon holds sequences
  bool spans_daemons() const { return nodes.size() > 1; }
};

struct serve_limits {
  batch_limits batch;
  int64_t max_queue = 64;           // requests waiting beyond the batch
  int64_t max_prompt_tokens = 0;    // 0: the model's max positions
  int64_t max_output_tokens = 0;    // 0: the model's max positions
  double request_timeout_s = 300.0; // arrival to the last token
  int64_t kv_cache_bytes = 64ll << 20;
  int64_t kv_block_tokens = 16;
  // Not a key: ranks of the replica's expert-parallel actors (each with
  // its share of the KV budget), serve.ep_size resolved for the model
  // (serve_config::ep_ranks_for); 0: one engine on the scheduler's thread,
  // no actors.
  int64_t ep_ranks = 1;
  double step_timeout_s = 30.0; // a rank's step, a shard restart included
  // Restarts of the whole expert tier within a minute (after its shards'
  // supervisor gave up: more than 3 shard restarts in a minute); one more
  // and the replica has failed and the process ends non-zero.
  int64_t expert_tier_restarts = 10;
  // A stop (SIGTERM on any daemon of the service): new requests get 503
  // and those taken have this long to finish before they are cancelled.
  double drain_timeout_s = 20.0;
  // Across daemons (serve.nodes): this is node 0, with one rank of the
  // group; the others follow (expert_node.hpp).
  ep_cluster cluster;
  // Dispatch and combine through one relay per rack (needs the racks):
  // the same tokens, fewer bytes across racks.
  bool rack_aware_alltoall = false;
  // The rows the dispatch sends: fp32, or 8 bits with a scale per row.
  dispatch_dtype dispatch = dispatch_dtype::fp32;
};

} // namespace tutti::serve
