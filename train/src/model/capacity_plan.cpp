#include "tutti/train/capacity_plan.hpp"

#include "tutti/moe/token_exchange.hpp"
#include "tutti/train/memory_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace tutti::train {

namespace {

constexpr double fp32 = 4.0;

std::string bytes_text(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", b, unit[u]);
  return buf;
}

std::string count_text(double x) {
  const char* unit[] = {"", "K", "M", "G", "T", "P", "E"};
  int u = 0;
  while (std::abs(x) >= 1000 && u < 6) {
    x /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g%s", x, unit[u]);
  return buf;
}

// Share of a rank's EP peers that sit on another node / in another rack.
void remote_shares(const job_config& cfg, double& cross_node,
                   double& cross_rack) {
  const auto& cl = cfg.cluster;
  const int64_t ep = cfg.ep_size(), per_node = cl.nproc_per_node;
  // The EP group of rank 0 is representative: every group spans the same
  // pattern of nodes.
  int64_t other_node = 0, other_rack = 0;
  auto rack_of = [&](int64_t rank) { return cl.node(rank / per_node).rack; };
  for (const int64_t peer : cfg.ep_group_of(0)) {
    if (peer / per_node != 0)
      ++other_node;
    if (rack_of(peer) != rack_of(0))
      ++other_rack;
  }
  cross_node = static_cast<double>(other_node) / ep;
  cross_rack = static_cast<double>(other_rack) / ep;
}

} // namespace

int64_t dispatch_buffer_rows(const job_config& cfg) {
  const auto& e = cfg.moe;
  // One micro-batch's tokens: a rank dispatches one at a time.
  const int64_t n = cfg.train.global_batch_size / cfg.cluster.world_size
                    / cfg.train.micro_batches * cfg.train.seq_len;
  const int64_t ep = cfg.ep_size(), local = cfg.experts_per_rank();
  if (e.capacity_factor > 0) {
    auto capacity = static_cast<int64_t>(
      std::ceil(e.capacity_factor * n * e.router_top_k / e.num_experts));
    return local * capacity * ep;
  }
  return ep * n * std::min(e.router_top_k, local);
}

capacity_plan make_capacity_plan(const job_config& cfg) {
  capacity_plan p;
  const auto& m = cfg.model;
  const auto& e = cfg.moe;
  const auto& cl = cfg.cluster;
  const double d = m.hidden_size, v = m.vocab_size;
  const double hd = head_dim_of(cfg), hq = m.num_attention_heads,
               layers = m.num_hidden_layers;
  const double k = e.router_top_k;
  const double s = cfg.train.seq_len;
  const double seqs = static_cast<double>(cfg.train.global_batch_size)
                      / cl.world_size;
  const double n = seqs * s; // local tokens per step

  double dense = v * d * 2 + d, experts = 0, active = 0, moe_layers = 0;
  for (int64_t i = 0; i < m.num_hidden_layers; ++i) {
    const auto layer = params_of_layer(cfg, i, 1, 1);
    dense += layer.dense;
    experts += layer.experts;
    active += k * layer.per_expert;
    moe_layers += layer.per_expert > 0;
  }
  p.dense_params = static_cast<int64_t>(dense);
  p.expert_params_total = static_cast<int64_t>(experts);
  p.expert_params_per_rank =
    static_cast<int64_t>(experts / static_cast<double>(cfg.ep_size()));
  p.active_params_per_token = static_cast<int64_t>(dense + active);

  // Memory by component: memory_plan.cpp, for the config's own layout.
  p.memory = plan_memory(cfg, layout_of(cfg));
  p.weights_bytes = p.memory.weights;
  p.grads_bytes = p.memory.gradients;
  p.optimizer_bytes = p.memory.master_weights + p.memory.optimizer
                      + p.memory.optimizer_scratch;
  p.activation_bytes = p.memory.activations + p.memory.working;
  p.dispatch_buffer_bytes = p.memory.dispatch;
  p.total_bytes = p.memory.total;
  const double rows = n * k; // routed rows per step, balanced routing

  // 2 FLOPs per multiply-add, x3 for forward + backward; attention scores
  // and values over the causal half.
  const double matmul = 2 * (p.active_params_per_token - v * d);
  const double attention = 2 * 2 * layers * hq * hd * s / 2;
  p.flops_per_token = 3 * (matmul + 2 * v * d + attention);
  p.flops_per_step = p.flops_per_token * cfg.train.global_batch_size * s;

  double cross_node = 0, cross_rack = 0;
  remote_shares(cfg, cross_node, cross_rack);
  // Every routed row crosses the all-to-all four times a step: dispatch and
  // combine, forward and backward (its own rank included); the forward
  // dispatch in moe_config.dispatch_dtype, the others in float32.
  const double dispatched = static_cast<double>(
    moe::dispatch_row_bytes(e.dispatch, m.hidden_size));
  p.alltoall_bytes = moe_layers * rows * (3 * d * fp32 + dispatched);
  p.alltoall_cross_node_bytes = p.alltoall_bytes * cross_node;
  p.alltoall_cross_rack_bytes = p.alltoall_bytes * cross_rack;
  const double edp = static_cast<double>(cl.world_size) / cfg.ep_size();
  p.allreduce_bytes = p.dense_params * fp32
                      + (edp > 1 ? p.expert_params_per_rank * fp32 : 0);
  p.allreduce_cross_node_bytes = cl.nnodes > 1 ? p.allreduce_bytes * 2
                                                   * (cl.nnodes - 1) / cl.nnodes
                                               : 0;

  // A TP group is tp consecutive ranks (job_config's order): it stays in a
  // node, on its fast links, only when the node holds whole groups.
  const int64_t tp = cfg.tp_size();
  if (tp > 1 && cl.nproc_per_node % tp != 0)
    p.warnings.push_back(
      "TP groups of " + std::to_string(tp) + " ranks span nodes of "
      + std::to_string(cl.nproc_per_node)
      + " (cluster_config.nproc_per_node): every layer's TP all-reduces "
        "cross the node link; keep tensor_model_parallel_size a divisor of "
        "nproc_per_node");
  if (cl.device_memory_gb > 0) {
    const double budget = cl.device_memory_gb * 1e9;
    if (p.total_bytes > budget)
      p.warnings.push_back(
        "does not fit: " + bytes_text(p.total_bytes) + " per rank > "
        + bytes_text(budget) + " (cluster_config.device_memory_gb); "
        + "raise cluster_config.ep_size to spread experts, set "
          "train.optimizer_sharding for the moments, raise "
          "train.micro_batches or set train.recompute for activations; "
          "`tutti plan CONFIG --search` lists layouts that fit");
    else if (p.activation_bytes > 0.5 * budget)
      p.warnings.push_back("activations take over half the device: lower "
                           "train.global_batch_size or train.seq_len");
  }
  return p;
}

std::string format_plan(const job_config& cfg, const capacity_plan& p) {
  std::ostringstream out;
  auto row = [&](const std::string& what, const std::string& value,
                 const std::string& note = "") {
    char buf[256];
    std::snprintf(buf, sizeof(buf), "  %-34s %14s  %s\n", what.c_str(),
                  value.c_str(), note.c_str());
    out << buf;
  };
  const auto& cl = cfg.cluster;
  out << "capacity plan: world " << cl.world_size << " (" << cl.nnodes
      << " nodes x " << cl.nproc_per_node << "), ep " << cfg.ep_size() << ", "
      << cfg.moe.num_experts << " experts top-" << cfg.moe.router_top_k << "\n";
  out << "parameters\n";
  row("dense (replicated)", count_text(p.dense_params));
  row("experts, all", count_text(p.expert_params_total));
  row("experts, per rank", count_text(p.expert_params_per_rank));
  row("active per token", count_text(p.active_params_per_token));
  const auto& mem = p.memory;
  const auto layout = layout_of(cfg);
  out << "memory per rank (" << precision_text(cfg) << "), "
      << layout_text(layout)
      << (layout.pp > 1
            ? ", stage " + std::to_string(mem.fullest_stage) + " the fullest"
            : "")
      << "\n";
  row("weights", bytes_text(mem.weights));
  row("gradients", bytes_text(mem.gradients));
  if (mem.master_weights > 0)
    row("master weights", bytes_text(mem.master_weights),
        layout.optimizer_sharding
          ? "fp32, dense ones sharded over DP " + std::to_string(layout.dp)
          : "fp32");
  row("optimizer moments", bytes_text(mem.optimizer),
      layout.optimizer_sharding
        ? "AdamW m and v, dense ones sharded over DP "
            + std::to_string(layout.dp)
        : "AdamW m and v");
  if (mem.optimizer_scratch > 0)
    row("optimizer second set", bytes_text(mem.optimizer_scratch),
        "experts' step taken aside (restart in place)");
  row("activations", bytes_text(mem.activations),
      bytes_text(mem.activations_micro) + " per micro-batch x "
        + count_text(mem.in_flight) + " in flight"
        + (mem.in_flight <= 1 ? ""
           : cfg.train.keep_expert_activations
               && layout.recompute != recompute_mode::full
             ? " (the experts' saved rows with each)"
             : " (the experts' saved rows once)")
        + ", recompute "
        + to_string(layout.recompute));
  if (mem.rows_half_again > 0)
    row("  routing imbalance", "+" + bytes_text(mem.rows_half_again),
        "if a rank's experts get 1.5x the balanced rows (capacity_factor 0: "
        "the plan assumes balance; a capacity bounds them)");
  row("attention, kept", bytes_text(mem.attention_saved_per_layer),
      std::string("per layer and micro-batch: ")
        + (mem.attention_tiled ? "tiled, each row's log-sum-exp"
                               : "the [seq, seq] probabilities"));
  row("working buffers", bytes_text(mem.working),
      "backward scratch, LM head, recomputed layer");
  row("dispatch buffers", bytes_text(mem.dispatch),
      std::string(cfg.moe.communication_buffer_size > 0
                    ? "communication_buffer_size"
                  : cfg.moe.capacity_factor > 0 ? "auto: from capacity"
                                                : "auto: dropless worst case")
        + (cfg.expert_restart_in_place() ? ", expert replay log" : ""));
  row("total", bytes_text(p.total_bytes),
      cl.device_memory_gb > 0
        ? "of " + bytes_text(cl.device_memory_gb * 1e9) + " device memory"
        : "");
  row("checkpoint host copies", bytes_text(mem.checkpoint),
      "rank 0, while a checkpoint is taken");
  if (mem.replicas > 0)
    row("in-memory replicas", bytes_text(mem.replicas),
        "node 0's host memory: its ranks' and a peer node's state, four "
        "steps at the peak (every node's: "
          + bytes_text(mem.replicas_all_nodes) + ")");
  row("KV cache per sequence", bytes_text(mem.kv_cache_per_sequence),
      "serving, at max_seq_len " + std::to_string(cfg.model.max_seq_len));
  out << "compute\n";
  row("FLOPs per token (fwd+bwd)", count_text(p.flops_per_token));
  row("FLOPs per step (global)", count_text(p.flops_per_step));
  out << "communication per rank per step\n";
  row("all-to-all", bytes_text(p.alltoall_bytes),
      std::string("dispatch+combine, fwd+bwd; forward dispatch ")
        + to_string(cfg.moe.dispatch));
  row("  of which cross-node", bytes_text(p.alltoall_cross_node_bytes));
  row("  of which cross-rack", bytes_text(p.alltoall_cross_rack_bytes));
  row("all-reduce payload", bytes_text(p.allreduce_bytes),
      "ring moves 2(n-1)/n of it");
  row("  cross-node traffic", bytes_text(p.allreduce_cross_node_bytes));
  for (const auto& w : p.warnings)
    out << "WARNING: " << w << "\n";
  return out.str();
}

} // namespace tutti::train
