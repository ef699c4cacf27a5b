#pragma once
// What the service measures, exposed at /metrics in Prometheus' text
// format: latency histograms (time to first token, inter-token latency,
// end-to-end, queue time), requests running and waiting, KV cache usage,
// prompt and generated tokens, finished and rejected requests, preemptions,
// prefix cache hits, all-to-all bytes, expert shard restarts, the tokens
// routed to each expert of each layer, what offloaded experts cost
// (the share of rows that chose one, the steps' wait on them), the
// experts' weight dtype and kernel, and the KV cache's bytes per position.
// Thread-safe: the scheduler's thread records, HTTP threads render.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tutti/observability/histogram.hpp"
#include "tutti/serve/link_bytes.hpp"
#include "tutti/serve/request.hpp"

namespace tutti::serve {

using observability::histogram;

struct serve_gauges {
  int64_t running = 0, waiting = 0, kv_used_blocks = 0, kv_total_blocks = 0;
  // Running totals the scheduler and the ranks keep.
  int64_t prefix_cache_hit_tokens = 0, all_to_all_bytes = 0,
          expert_shard_restarts = 0, expert_tier_restarts = 0;
  // The whole group's all-to-all bytes by link class (ep_ranks.hpp).
  link_bytes all_to_all_link_bytes{};
  // Offload (offload_layout.hpp): (layer, expert) pairs offloaded; rows
  // (token, layer) that chose one of them, of all routed rows.
  int64_t offloaded_experts = 0, offloaded_rows = 0, routed_rows = 0;
  // With serve.racks: the last window's cross-rack share of rows, and
  // the layouts replanned live (serve.replan).
  double cross_rack_share = 0.0;
  int64_t replans = 0;
  // Across daemons: bytes of experts this daemon read from the model's
  // directory because a new layout moved them here (expert_loading.hpp).
  int64_t expert_loaded_bytes = 0;
  // With serve.rack_affinity: requests started in the rack of their
  // prompt's experts, and those that went elsewhere (that rack's ranks
  // were too full).
  int64_t placed_by_affinity = 0, placed_elsewhere = 0;
  // Requests placed on each rank that holds sequences.
  std::vector<int64_t> placed_on_rank;
};

// Counts since the start, for the shell's `status` of a service.
struct serve_totals {
  int64_t prompt_tokens = 0, generation_tokens = 0, preemptions = 0;
  int64_t finished = 0, rejected = 0; // requests, whatever the reason
};

class serve_metrics {
public:
  serve_metrics(int64_t layers, int64_t experts);

  void started(const request& r, clock::time_point now); // first scheduled
  void token(const request& r, clock::time_point now, bool first);
  void finished(const request& r, finish_reason why, clock::time_point now);
  void rejected(const std::string& why);
  void preempted();
  // A step whose tokens chose offloaded experts waited `seconds` on them.
  void offload_waited(double seconds);
  void set_gauges(const serve_gauges& g,
                  const std::vector<int64_t>& expert_activations);
  // The experts' weights as served and the kernel that multiplies them
  // (model.hpp's expert_weights_text), set once at start.
  void set_expert_weights(const std::string& dtype, const std::string& kernel);
  // Bytes of KV cache one position takes, every layer (kv_cache.hpp's
  // kv_geometry::token_bytes: keys and values, or MLA's latent row), set
  // once at start.
  void set_kv_bytes_per_token(int64_t bytes);

  serve_gauges gauges() const;
  serve_totals totals() const;
  std::string render(const std::string& model_name) const;

private:
  mutable std::mutex mutex_;
  int64_t layers_, experts_;
  histogram ttft_, itl_, e2e_, queue_, offload_wait_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0, preemptions_ = 0;
  std::map<std::string, int64_t> finished_, rejected_;
  serve_gauges gauges_;
  std::vector<int64_t> activations_;
  std::string weight_dtype_ = "fp32", weight_kernel_ = "packed_fp32";
  int64_t kv_bytes_per_token_ = 0;
};

} // namespace tutti::serve
