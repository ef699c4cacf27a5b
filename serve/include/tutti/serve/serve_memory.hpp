#pragma once
// What each daemon of a replica holds in memory, predicted from the
// model's shape and the serve config before anything loads (`tutti serve
// --plan`, and serve.memory_limit's check at the start): the dense
// weights (every matrix row-major and packed), its ranks' own experts
// (packed; one process holding every expert keeps float experts'
// row-major copies too) and its KV cache. The process's own code,
// threads and buffers come on top.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/serve_config.hpp"
#include "tutti/serve/expert_layout.hpp"
#include "tutti/serve/model.hpp"

namespace tutti::serve {

struct daemon_memory {
  int64_t node = 0;
  std::string address; // serve.nodes' entry; "" in one process
  int64_t dense_bytes = 0;
  int64_t experts = 0; // (layer, expert) pairs held
  int64_t expert_bytes = 0;
  int64_t kv_cache_bytes = 0;
  int64_t total() const { return dense_bytes + expert_bytes + kv_cache_bytes; }
};

// How many shares of serve.kv_cache_bytes a process's ranks split: one a
// rank; across daemons without data_parallel_attention one, node 0's
// leader's, which holds every sequence (the other ranks keep one block).
int64_t kv_budget_shares(const serve_limits& l);

// The layout the replica starts with: serve.placement / serve.offload's
// (layout_for), else contiguous over its ranks. Needs c.limits.ep_ranks.
expected<std::shared_ptr<const expert_layout>> start_layout(
  const serve_config& c, const model_shape& s);

// Bytes of the dense weights as served_model holds them.
int64_t dense_weight_bytes(const model_shape& s);
// Bytes of one expert packed in `dtype`, and with `row_major` (float
// experts) the float row-major copy beside it.
int64_t expert_weight_bytes(const model_shape& s, weight_dtype dtype,
                            bool row_major);

// Per daemon of serve.nodes (one entry for one process), for a model of
// shape `s` whose experts are served in `dtype`, under layout `x` (across
// daemons; one process holds every expert).
std::vector<daemon_memory> predict_memory(const serve_config& c,
                                          const model_shape& s,
                                          weight_dtype dtype,
                                          const expert_layout* x);

// The table `tutti serve --plan` prints.
std::string memory_plan_text(const serve_config& c, const model_shape& s,
                             weight_dtype dtype,
                             const std::vector<daemon_memory>& daemons);

// serve.memory_limit against daemon `node`'s prediction: a one-line
// refusal naming the daemon and the figures when it is above the limit.
status check_memory_limit(const serve_config& c, const daemon_memory& d);

} // namespace tutti::serve
