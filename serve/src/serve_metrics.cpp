#include "tutti/serve/serve_metrics.hpp"

#include "tutti/observability/prometheus_text.hpp"

namespace tutti::serve {

namespace {

double seconds(clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};
}

} // namespace

serve_metrics::serve_metrics(int64_t layers, int64_t experts)
  : layers_(layers), experts_(experts), ttft_(latency_buckets()),
    itl_(latency_buckets()), e2e_(latency_buckets()), queue_(latency_buckets()),
    offload_wait_(latency_buckets()), activations_(layers * experts, 0) {}

void serve_metrics::started(const request& r, clock::time_point now) {
  std::lock_guard lock(mutex_);
  queue_.observe(seconds(now - r.arrival));
  prompt_tokens_ += static_cast<int64_t>(r.prompt.size());
}

void serve_metrics::token(const request& r, clock::time_point now, bool first) {
  std::lock_guard lock(mutex_);
  ++generation_tokens_;
  if (first)
    ttft_.observe(seconds(now - r.arrival));
  else
    itl_.observe(seconds(now - r.last_token_at));
}

void serve_metrics::finished(const request& r, finish_reason why,
                             clock::time_point now) {
  std::lock_guard lock(mutex_);
  e2e_.observe(seconds(now - r.arrival));
  ++finished_[finish_reason_name(why)];
}

void serve_metrics::rejected(const std::string& why) {
  std::lock_guard lock(mutex_);
  ++rejected_[why];
}

void serve_metrics::preempted() {
  std::lock_guard lock(mutex_);
  ++preemptions_;
}

void serve_metrics::offload_waited(double seconds) {
  std::lock_guard lock(mutex_);
  offload_wait_.observe(seconds);
}

void serve_metrics::set_gauges(const serve_gauges& g,
                               const std::vector<int64_t>& activations) {
  std::lock_guard lock(mutex_);
  gauges_ = g;
  activations_ = activations;
}

void serve_metrics::set_expert_weights(const std::string& dtype,
                                       const std::string& kernel) {
  std::lock_guard lock(mutex_);
  weight_dtype_ = dtype;
  weight_kernel_ = kernel;
}

void serve_metrics::set_kv_bytes_per_token(int64_t bytes) {
  std::lock_guard lock(mutex_);
  kv_bytes_per_token_ = bytes;
}

serve_totals serve_metrics::totals() const {
  std::lock_guard lock(mutex_);
  serve_totals t{prompt_tokens_, generation_tokens_, preemptions_, 0, 0};
  for (const auto& [why, n] : finished_)
    t.finished += n;
  for (const auto& [why, n] : rejected_)
    t.rejected += n;
  return t;
}

serve_gauges serve_metrics::gauges() const {
  std::lock_guard lock(mutex_);
  return gauges_;
}

std::string serve_metrics::render(const std::string& model) const {
  std::lock_guard lock(mutex_);
  observability::prometheus_text t;
  const observability::label_list m = {{"model", model}};
  t.metric("tutti_serve_expert_weights_info", "gauge",
           "the experts' weights as served (serve.weight_dtype) and the "
           "kernel that multiplies them, chosen at start by the CPU",
           {{"model", model}, {"dtype", weight_dtype_},
            {"kernel", weight_kernel_}},
           1.0);
  t.metric("tutti_serve_requests_running", "gauge",
           "requests in the running batch", m, double(gauges_.running));
  t.metric("tutti_serve_requests_waiting", "gauge",
           "requests queued or preempted, waiting to run", m,
           double(gauges_.waiting));
  t.metric("tutti_serve_kv_cache_usage_ratio", "gauge",
           "fraction of KV cache blocks in use", m,
           gauges_.kv_total_blocks
             ? double(gauges_.kv_used_blocks) / double(gauges_.kv_total_blocks)
             : 0.0);
  t.metric("tutti_serve_kv_cache_blocks_used", "gauge",
           "KV cache blocks held by requests", m,
           double(gauges_.kv_used_blocks));
  t.metric("tutti_serve_kv_cache_blocks", "gauge", "KV cache blocks in all", m,
           double(gauges_.kv_total_blocks));
  t.metric("tutti_serve_kv_cache_bytes_per_token", "gauge",
           "KV cache bytes one position takes over all layers: keys and "
           "values, or with multi-head latent attention the latent and the "
           "rotated key",
           m, double(kv_bytes_per_token_));
  t.metric("tutti_serve_prompt_tokens_total", "counter",
           "prompt tokens of the requests started", m, double(prompt_tokens_));
  t.metric("tutti_serve_generation_tokens_total", "counter", "tokens generated",
           m, double(generation_tokens_));
  t.metric("tutti_serve_preemptions_total", "counter",
           "requests preempted for KV cache blocks (recomputed later)", m,
           double(preemptions_));
  t.metric("tutti_serve_prefix_cache_hit_tokens_total", "counter",
           "prompt positions taken from cached KV blocks, not computed", m,
           double(gauges_.prefix_cache_hit_tokens));
  t.metric("tutti_serve_all_to_all_bytes_total", "counter",
           "bytes the expert-parallel ranks sent in dispatch and combine", m,
           double(gauges_.all_to_all_bytes));
  t.family("tutti_serve_alltoall_bytes_total", "counter",
           "all-to-all bytes the replica's ranks sent (rows and relay "
           "metadata), by the link they crossed: self (a rank's own "
           "copies), intra_rack, inter_rack (serve.racks)");
  const auto& lb = gauges_.all_to_all_link_bytes;
  for (int l = 0; l < link_classes; ++l)
    t.sample("tutti_serve_alltoall_bytes_total",
             {{"model", model}, {"link", link_name(link_class(l))}},
             double(lb[l]));
  t.family("tutti_serve_alltoall_cross_rack_share", "gauge",
           "share of the all-to-all bytes on links (not self) that crossed "
           "racks, since the start");
  const double on_links = double(lb[1] + lb[2]);
  t.sample("tutti_serve_alltoall_cross_rack_share", m,
           on_links > 0 ? double(lb[2]) / on_links : 0.0);
  t.metric("tutti_serve_expert_shard_restarts_total", "counter",
           "expert shard failures the ranks survived by a restart", m,
           double(gauges_.expert_shard_restarts));
  t.metric("tutti_serve_expert_tier_restarts_total", "counter",
           "restarts of the whole expert tier after its shards' supervisor "
           "gave up",
           m, double(gauges_.expert_tier_restarts));
  t.family("tutti_serve_requests_finished_total", "counter",
           "requests finished, by finish reason");
  for (const auto& [why, n] : finished_)
    t.sample("tutti_serve_requests_finished_total",
             {{"model", model}, {"finish_reason", why}}, double(n));
  t.family("tutti_serve_requests_rejected_total", "counter",
           "requests refused before running, by reason");
  for (const auto& [why, n] : rejected_)
    t.sample("tutti_serve_requests_rejected_total",
             {{"model", model}, {"reason", why}}, double(n));
  t.family("tutti_serve_expert_tokens_total", "counter",
           "tokens routed to each expert of each layer");
  for (int64_t l = 0; l < layers_; ++l)
    for (int64_t e = 0; e < experts_; ++e)
      t.sample("tutti_serve_expert_tokens_total",
               {{"model", model},
                {"layer", std::to_string(l)},
                {"expert", std::to_string(e)}},
               double(activations_[l * experts_ + e]));
  t.metric("tutti_serve_offloaded_experts", "gauge",
           "(layer, expert) pairs served by the offload rank (serve.offload)",
           m, double(gauges_.offloaded_experts));
  t.metric("tutti_serve_offloaded_expert_rows_total", "counter",
           "rows (token, layer) that chose an offloaded expert", m,
           double(gauges_.offloaded_rows));
  t.metric("tutti_serve_routed_rows_total", "counter",
           "rows (token, layer) routed to experts", m,
           double(gauges_.routed_rows));
  t.metric("tutti_serve_offloaded_token_share", "gauge",
           "share of routed rows that chose an offloaded expert", m,
           gauges_.routed_rows
             ? double(gauges_.offloaded_rows) / double(gauges_.routed_rows)
             : 0.0);
  t.metric("tutti_serve_cross_rack_share", "gauge",
           "share of routed rows whose expert was in another rack than "
           "their sequence, over the last replan window (serve.racks)",
           m, gauges_.cross_rack_share);
  t.metric("tutti_serve_expert_replans_total", "counter",
           "expert layouts replanned live by rack (serve.replan)", m,
           double(gauges_.replans));
  t.metric("tutti_serve_expert_loaded_bytes_total", "counter",
           "bytes of expert weights node 0 read from the model's directory "
           "because a new layout moved those experts to it (across "
           "daemons each holds only its own)",
           m, double(gauges_.expert_loaded_bytes));
  t.metric(
    "tutti_serve_requests_placed_total", "counter",
    "requests placed by serve.rack_affinity: in the rack of their "
    "prompt's experts, or elsewhere (that rack's ranks had less than half "
    "the emptiest rank's free KV blocks)",
    {{"model", model}, {"by", "affinity"}}, double(gauges_.placed_by_affinity));
  t.sample("tutti_serve_requests_placed_total",
           {{"model", model}, {"by", "elsewhere"}},
           double(gauges_.placed_elsewhere));
  t.family("tutti_serve_requests_placed_on_rank_total", "counter",
           "requests placed on each rank holding sequences (across daemons "
           "with serve.data_parallel_attention, rank = node rank)");
  for (size_t r = 0; r < gauges_.placed_on_rank.size(); ++r)
    t.sample("tutti_serve_requests_placed_on_rank_total",
             {{"model", model}, {"rank", std::to_string(r)}},
             double(gauges_.placed_on_rank[r]));
  struct latency {
    const histogram& h;
    const char *name, *help;
  };
  const latency latencies[] = {
    {ttft_, "tutti_serve_time_to_first_token_seconds",
     "from arrival to the first generated token"},
    {itl_, "tutti_serve_inter_token_latency_seconds",
     "between consecutive generated tokens of a request"},
    {e2e_, "tutti_serve_e2e_request_latency_seconds",
     "from arrival to the end of the request"},
    {queue_, "tutti_serve_queue_time_seconds",
     "from arrival to the first step that ran it"},
    {offload_wait_, "tutti_serve_offload_wait_seconds",
     "per step whose tokens chose an offloaded expert, the time waited in "
     "those layers' combine"}};
  for (const auto& l : latencies) {
    t.histogram_family(l.name, l.help);
    t.histogram_sample(l.name, {}, l.h.counts());
  }
  return t.str();
}

} // namespace tutti::serve
