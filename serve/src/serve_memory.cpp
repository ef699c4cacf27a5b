#include "tutti/serve/serve_memory.hpp"

#include <algorithm>
#include <cstdio>

#include "tutti/serve/kv_cache.hpp"
#include "tutti/serve/serve_layout.hpp"

namespace tutti::serve {

expected<std::shared_ptr<const expert_layout>> start_layout(
  const serve_config& c, const model_shape& s) {
  auto x = layout_for(c, s);
  if (!x || x.value())
    return x;
  const auto& cl = c.limits.cluster;
  const int64_t per_daemon = std::max<int64_t>(c.limits.ep_ranks, 1);
  const int64_t ranks =
    cl.spans_daemons() ? static_cast<int64_t>(cl.nodes.size()) * per_daemon
                       : per_daemon;
  auto contiguous = expert_layout::contiguous(s.layers, s.experts, ranks);
  if (!contiguous)
    return status::error(std::string(cl.spans_daemons()
                                       ? "serve.nodes x serve.ep_size: "
                                       : "serve.ep_size: ")
                         + contiguous.message());
  return std::make_shared<const expert_layout>(std::move(contiguous.value()));
}

int64_t dense_weight_bytes(const model_shape& s) {
  const int64_t D = s.hidden, E = s.experts;
  const int64_t Q = s.q_heads * s.head_dim, KV = s.kv_heads * s.head_dim;
  // Matrices twice (row-major and packed), norms and biases once.
  int64_t attention = Q * D + 2 * KV * D + D * Q;
  int64_t attention_vectors = s.qk_norm ? 2 * s.head_dim : 0;
  if (s.mla()) {
    const int64_t H = s.q_heads, ql = s.q_lora_rank, kvl = s.kv_lora_rank;
    const int64_t nope = s.qk_nope_head_dim;
    attention = (ql > 0 ? ql * D + H * s.qk_head_dim() * ql
                        : H * s.qk_head_dim() * D)
                + (kvl + s.qk_rope_head_dim) * D
                + H * (nope + s.v_head_dim) * kvl + D * H * s.v_head_dim
                + H * kvl * nope / 2; // the decode's transposed key half
    attention_vectors = ql + kvl;
  }
  const int64_t moe_layer = 2 * (attention + E * D + 3 * s.shared_intermediate() * D)
                            + attention_vectors + 2 * D + E;
  const int64_t dense_layer = 2 * (attention + 3 * s.dense_intermediate * D)
                              + attention_vectors + 2 * D;
  const int64_t floats =
    s.vocab * D /* embed */ + 2 * s.vocab * D /* lm_head, packed */ + D
    + (s.layers - s.dense_layers) * moe_layer + s.dense_layers * dense_layer;
  return floats * 4;
}

int64_t expert_weight_bytes(const model_shape& s, weight_dtype dtype,
                            bool row_major) {
  const int64_t D = s.hidden, F = s.intermediate;
  switch (dtype) {
    case weight_dtype::int8: return 3 * F * D + (2 * F + D) * 4;
    case weight_dtype::bf16: // pairs along the inner dimension
      return ((D + 1) / 2 * 2 * F + (F + 1) / 2 * D) * 4;
    case weight_dtype::fp32: break;
  }
  return 3 * F * D * 4 * (row_major ? 2 : 1);
}

int64_t kv_budget_shares(const serve_limits& l) {
  const auto& cl = l.cluster;
  return cl.spans_daemons() && !cl.data_parallel_attention
           ? 1
           : std::max<int64_t>(l.ep_ranks, 1);
}

std::vector<daemon_memory> predict_memory(const serve_config& c,
                                          const model_shape& s,
                                          weight_dtype dtype,
                                          const expert_layout* x) {
  const auto& l = c.limits;
  const auto& cl = l.cluster;
  const kv_geometry g = geometry_of_shape(s, l.kv_block_tokens);
  const int64_t budget_blocks = kv_cache::blocks_for_budget(g,
                                                            l.kv_cache_bytes);
  // int8 experts multiplying int8 rows keep each output's code sum too
  // (kernels::with_int8_rows), in place of nothing.
  const int64_t row_sums =
    dtype == weight_dtype::int8 && c.activations == activation_dtype::int8
      ? (2 * s.intermediate + s.hidden) * 4
      : 0;
  std::vector<daemon_memory> out;
  if (!cl.spans_daemons()) {
    // One process holds every expert; float ones with their row-major
    // copies (model_from_tensors).
    const int64_t ranks = std::max<int64_t>(l.ep_ranks, 1);
    daemon_memory d;
    d.dense_bytes = dense_weight_bytes(s);
    d.experts = (s.layers - s.dense_layers) * s.experts;
    d.expert_bytes = d.experts
                     * (expert_weight_bytes(s, dtype,
                                            dtype == weight_dtype::fp32)
                        + row_sums);
    d.kv_cache_bytes = budget_blocks / ranks * ranks * g.block_bytes();
    out.push_back(d);
    return out;
  }
  const int64_t k = std::max<int64_t>(l.ep_ranks, 1); // ranks a daemon
  for (int64_t n = 0; n < static_cast<int64_t>(cl.nodes.size()); ++n) {
    daemon_memory d;
    d.node = n;
    d.address = cl.nodes[n];
    d.dense_bytes = dense_weight_bytes(s);
    for (int64_t r = n * k; r < (n + 1) * k; ++r)
      for (int64_t layer = s.dense_layers; x && layer < x->layers; ++layer)
        d.experts += x->end(layer, r) - x->begin(layer, r);
    d.expert_bytes =
      d.experts * (expert_weight_bytes(s, dtype, false) + row_sums);
    // With data_parallel_attention every rank holds its share of the
    // budget; else node 0's first rank all of it, every other one block.
    const int64_t per_rank = budget_blocks / kv_budget_shares(l);
    const int64_t blocks = cl.data_parallel_attention
                             ? per_rank * k
                             : (n == 0 ? per_rank + k - 1 : k);
    d.kv_cache_bytes = blocks * g.block_bytes();
    out.push_back(d);
  }
  return out;
}

namespace {

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / 1048576.0);
  return text;
}

} // namespace

std::string memory_plan_text(const serve_config& c, const model_shape& s,
                             weight_dtype dtype,
                             const std::vector<daemon_memory>& daemons) {
  char line[512];
  std::string out;
  std::snprintf(line, sizeof line,
                "serve plan: %lld layers, %lld experts (%s), over %zu "
                "daemon%s; bytes each daemon holds:\n",
                static_cast<long long>(s.layers),
                static_cast<long long>(s.experts), to_string(dtype),
                daemons.size(), daemons.size() == 1 ? "" : "s");
  out += line;
  std::snprintf(line, sizeof line, "%-6s %-16s %14s %8s %14s %14s %14s\n",
                "daemon", "address", "dense", "experts", "expert_bytes",
                "kv_cache", "total");
  out += line;
  for (const auto& d : daemons) {
    std::snprintf(line, sizeof line,
                  "%-6lld %-16s %14lld %8lld %14lld %14lld %14lld  (%s)\n",
                  static_cast<long long>(d.node),
                  d.address.empty() ? "-" : d.address.c_str(),
                  static_cast<long long>(d.dense_bytes),
                  static_cast<long long>(d.experts),
                  static_cast<long long>(d.expert_bytes),
                  static_cast<long long>(d.kv_cache_bytes),
                  static_cast<long long>(d.total()), mib(d.total()).c_str());
    out += line;
  }
  if (c.memory_limit > 0) {
    int64_t over = 0;
    for (const auto& d : daemons)
      over += d.total() > c.memory_limit ? 1 : 0;
    out += "serve.memory_limit " + std::to_string(c.memory_limit) + " ("
           + mib(c.memory_limit) + "): "
           + (over ? std::to_string(over) + " daemon(s) above it"
                   : std::string("every daemon fits"))
           + "\n";
  }
  return out;
}

status check_memory_limit(const serve_config& c, const daemon_memory& d) {
  if (c.memory_limit <= 0 || d.total() <= c.memory_limit)
    return {};
  return status::error(
    "serve.memory_limit: daemon " + std::to_string(d.node)
    + (d.address.empty() ? std::string() : " (" + d.address + ")")
    + " would hold " + std::to_string(d.total()) + " bytes (dense "
    + std::to_string(d.dense_bytes) + " + " + std::to_string(d.experts)
    + " own experts " + std::to_string(d.expert_bytes) + " + KV cache "
    + std::to_string(d.kv_cache_bytes) + "), above the limit of "
    + std::to_string(c.memory_limit));
}

} // namespace tutti::serve
