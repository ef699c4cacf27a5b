#pragma once
// One process of `tutti serve`: the whole service (node 0, or the only
// node), or, across daemons (serve.nodes), a follower node holding its
// share of the experts. `tutti serve CONFIG` runs node 0; `tuttid --config
// CONFIG --node-rank N` with a serve config runs node N. Runs until SIGINT
// or SIGTERM (or, on a follower, until node 0 stops or goes away).

#include <cstdint>

#include "tutti/config/serve_config.hpp"

namespace tutti::cli {

// `prog` prefixes messages; bad config or model: exit 2, before listening.
// `write_log`: node 0 logs to c.log_dir/tutti-serve-PORT.log.jsonl once it
// listens (tuttid keeps its own log).
int run_serve_node(serve::serve_config c, int64_t node_rank, const char* prog,
                   bool write_log = false);

// `tutti serve CONFIG --plan`: the bytes each daemon would hold (dense
// weights, its own experts, KV cache) against serve.memory_limit; exit 1
// when a daemon is above it, 2 for a bad config or model.
int plan_serve(serve::serve_config c, const char* prog);

} // namespace tutti::cli
