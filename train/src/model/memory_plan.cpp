// plan_memory mirrors what the engine allocates (rank_model's constructor
// and scratch, expert_ffn's saved rows, the shard executor's replay log,
// the dispatch buffers); estimate_step and search_layouts rank layouts.

#include "tutti/train/memory_plan.hpp"

#include <algorithm>
#include <cmath>

#include "tutti/kernels/ops.hpp"
#include "tutti/train/capacity_plan.hpp"

namespace tutti::train {

namespace {

constexpr double fp32 = 4.0;

// The shapes one rank of a layout works on, in elements.
struct shapes {
  double d, f, v, hq, hkv, hd, E, K, s, layers;
  double n;       // tokens of one micro-batch on one data-parallel rank
  double seqs;    // its sequences
  double recv;    // rows this rank's experts receive per layer (balanced)
  double dense_layer, expert_layer; // parameters of one layer on this rank
};

shapes shapes_of(const job_config& cfg, const parallel_layout& l) {
  const auto& m = cfg.model;
  const auto& e = cfg.moe;
  shapes x{};
  x.d = m.hidden_size;
  // TP as built: heads (query and KV; T divides both) and the experts'
  // intermediate dimension split, the embedding and LM head replicated.
  x.f = static_cast<double>(m.intermediate_size) / l.tp;
  x.v = static_cast<double>(m.vocab_size);
  x.hq = static_cast<double>(m.num_attention_heads) / l.tp;
  x.hkv = static_cast<double>(m.num_key_value_heads) / l.tp;
  x.hd = m.head_dim();
  x.E = e.num_experts;
  x.K = e.router_top_k;
  x.s = cfg.train.seq_len;
  x.layers = std::ceil(static_cast<double>(m.num_hidden_layers) / l.pp);
  x.seqs = static_cast<double>(cfg.train.global_batch_size) / l.dp
           / l.micro_batches;
  x.n = x.seqs * x.s;
  x.recv = x.n * x.K;
  if (e.capacity_factor > 0)
    x.recv = std::min(x.recv, std::ceil(e.capacity_factor * x.n * x.K / x.E)
                                * x.E);
  x.dense_layer = 2 * x.d + x.d * x.hq * x.hd * 2 + x.d * x.hkv * x.hd * 2
                  + x.E * x.d;
  x.expert_layer = x.E / l.ep * 3 * x.d * x.f;
  return x;
}

// Dispatch receive rows (capacity_plan's dispatch_buffer_rows) for a layout.
double dispatch_rows(const job_config& cfg, const parallel_layout& l,
                     const shapes& x) {
  const auto& e = cfg.moe;
  const double local = x.E / l.ep;
  if (e.capacity_factor > 0)
    return local * std::ceil(e.capacity_factor * x.n * x.K / x.E) * l.ep;
  return l.ep * x.n * std::min(x.K, local);
}

} // namespace

parallel_layout layout_of(const job_config& cfg) {
  parallel_layout l;
  const auto& c = cfg.cluster;
  l.tp = std::max<int64_t>(1, c.tensor_model_parallel_size);
  l.pp = std::max<int64_t>(1, c.pipeline_model_parallel_size);
  l.ep = cfg.ep_size();
  l.dp = std::max<int64_t>(1, c.world_size / (l.tp * l.pp));
  l.micro_batches = cfg.train.micro_batches;
  l.recompute = cfg.train.recompute;
  l.optimizer_sharding = cfg.train.optimizer_sharding && l.dp > 1;
  return l;
}

memory_breakdown plan_memory(const job_config& cfg, const parallel_layout& l) {
  const shapes x = shapes_of(cfg, l);
  const double d = x.d, n = x.n, nd = n * d;
  memory_breakdown b;
  // PP: each stage holds, trains and updates its own layers' weights and
  // experts, the first the embedding, the last the final norm and LM head
  // (stage_layout.hpp). The whole model's counts size the checkpoint.
  parallel_layout whole_layers = l;
  whole_layers.tp = 1;
  whole_layers.pp = 1;
  parallel_layout one_stage = l;
  one_stage.pp = 1;
  const shapes all = shapes_of(cfg, one_stage);
  const double dense = all.layers * all.dense_layer + 2 * x.v * d + d;
  const double experts = all.layers * all.expert_layer;
  const double stage_experts = x.layers * x.expert_layer;
  auto stage_dense = [&](int64_t stage) {
    return x.layers * x.dense_layer + (stage == 0 ? x.v * d : 0)
           + (stage + 1 == l.pp ? x.v * d + d : 0);
  };
  // Weights, gradients, moments and the experts' second set of a stage.
  auto stage_fixed = [&](int64_t stage) {
    const double own = stage_dense(stage);
    return (2 * (own + stage_experts)
            + 2 * (own / (l.optimizer_sharding ? l.dp : 1) + stage_experts)
            + (cfg.expert_restart_in_place() ? 3 * stage_experts : 0))
           * fp32;
  };
  auto set_fixed = [&](int64_t stage) {
    const double own = stage_dense(stage);
    b.weights = (own + stage_experts) * fp32;
    b.gradients = b.weights;
    b.optimizer = 2 * fp32
                  * (own / (l.optimizer_sharding ? l.dp : 1) + stage_experts);
    b.optimizer_scratch =
      cfg.expert_restart_in_place() ? 3 * stage_experts * fp32 : 0;
  };

  // No sequence parallelism: every TP rank holds the whole [tokens,
  // hidden] activations and runs the norms on all of them.
  // The attention core keeps what rank_model sizes: no [s, s] term where
  // it is tiled, whose backward needs one value per query row of scratch.
  const auto device = cfg.cluster.device == compute_device::cuda
                        ? kernels::device_kind::cuda
                        : kernels::device_kind::cpu;
  b.attention_tiled = kernels::attention_is_tiled(device, cfg.train.seq_len);
  const double probs =
    x.seqs * x.hq
    * static_cast<double>(
      kernels::attention_saved_per_head(device, cfg.train.seq_len));
  b.attention_saved_per_layer = probs * fp32;
  const double attention_scratch = b.attention_tiled ? n * x.hq : 0;
  const double layer_rest = 3 * nd + 2 * n + 2 * n * x.hq * x.hd
                            + 2 * n * x.hkv * x.hd + 2 * n * x.E + 4 * n * x.K
                            + x.recv * d + 2 * x.recv;
  // The expert shard keeps a layer's last forward only, once per layer
  // however many micro-batches are in flight.
  const double shard_saved = x.layers * x.recv * (d + 3 * x.f);
  double per_layer = nd;
  double shared = 0; // recompute's one layer
  switch (l.recompute) {
  case recompute_mode::none:
    per_layer += layer_rest + probs;
    break;
  case recompute_mode::selective:
    per_layer += layer_rest;
    shared = probs;
    break;
  case recompute_mode::full:
    shared = layer_rest + probs;
    break;
  }
  // A stage's micro-batch: its layers' activations and, before the last
  // stage, its output (the next stage's input) kept with them.
  auto kept_micro = [&](int64_t stage) {
    return x.layers * per_layer + (stage + 1 < l.pp ? nd : 0);
  };
  // 1F1B: stage s keeps up to min(pp - s, m) micro-batches in flight.
  auto in_flight = [&](int64_t stage) {
    return static_cast<double>(std::min(l.pp - stage, l.micro_batches));
  };
  // The final norm, LM head logits and loss buffers are sized on every
  // stage; the logits' gradient only where the loss is, the last stage.
  auto head = [&](int64_t stage) {
    return 2 * nd + 2 * n + n * x.v
           + (stage + 1 == l.pp ? n * std::max(x.v, x.E) : 0);
  };
  const double scratch = 3 * nd + 2 * n * x.hq * x.hd + 2 * n * x.hkv * x.hd
                         + n * x.K + 3 * x.recv * x.f + x.recv * d + 2 * n
                         + attention_scratch;

  const double rows = cfg.moe.communication_buffer_size > 0
                        ? cfg.moe.communication_buffer_size / (d * fp32)
                        : dispatch_rows(cfg, l, x);
  double dispatch = 3 * rows * d + n * x.K * d + 2 * x.recv * d;
  if (cfg.expert_restart_in_place()) {
    // The shard executor copies each expert call's input for a replay:
    // forward and backward, every layer, every micro-batch of the step.
    const double calls = l.recompute == recompute_mode::full ? 3 : 2;
    dispatch += calls * x.layers * l.micro_batches * x.recv * d;
  }
  b.dispatch = dispatch * fp32;
  auto stage_total = [&](int64_t stage) {
    return stage_fixed(stage) + b.dispatch
           + (in_flight(stage) * kept_micro(stage) + shard_saved) * fp32
           + (shared + head(stage) + scratch) * fp32;
  };
  // The fullest stage: the first keeps the most micro-batches, the last
  // the logits' gradient.
  int64_t fullest = 0;
  b.stages = l.pp;
  for (int64_t stage = 0; stage < l.pp; ++stage) {
    b.total_all_stages += stage_total(stage);
    if (stage_total(stage) > stage_total(fullest))
      fullest = stage;
  }
  set_fixed(fullest);
  b.in_flight = in_flight(fullest);
  b.activations_micro = (kept_micro(fullest) + shard_saved) * fp32;
  b.activations = (b.in_flight * kept_micro(fullest) + shard_saved) * fp32;
  b.working = (shared + head(fullest) + scratch) * fp32;

  // Rank 0 at a checkpoint: host copies of weights and moments (the dense
  // moments whole, gathered when sharded) and the experts' (the shard's
  // snapshot, which the rank's shares). Under PP stage 0's ranks receive
  // the later stages' layers tensor by tensor and write the whole model.
  const double snapshot = 3 * experts * fp32; // weights and both moments
  const double writers = static_cast<double>(std::min(l.ep, l.dp));
  if (l.tp == 1) {
    b.checkpoint_other = snapshot;
    b.checkpoint = (5 + (l.optimizer_sharding ? 1 : 0)) * dense * fp32
                   + snapshot;
    // The first ep data-parallel ranks write experts; a later stage's
    // holds its own layers' snapshot while it sends them.
    b.checkpoint_others = (writers - 1) * snapshot
                          + (l.pp - 1) * writers * 3 * stage_experts * fp32;
  } else {
    // TP rank 0 of each of the first ep data-parallel ranks gathers its TP
    // group's slices: the received parts and their host copy, each T
    // snapshots (the join into whole tensors, as large, comes after the
    // buffer is freed). The other TP ranks send: their snapshot and the
    // buffer it is copied to. Rank 0 also joins the dense tensors whole.
    const shapes w = shapes_of(cfg, whole_layers);
    const double dense_whole = w.layers * w.dense_layer + 2 * w.v * d + d;
    const double t = static_cast<double>(l.tp);
    const double gathering = 2 * t * snapshot, sending = 2 * snapshot;
    b.checkpoint_other = writers > 1 ? gathering : sending;
    b.checkpoint = 5 * dense_whole * fp32 + gathering;
    b.checkpoint_others = (writers - 1) * gathering + writers * (t - 1) * sending;
  }
  b.kv_cache_per_sequence = 2 * all.layers * x.hkv * x.hd
                            * cfg.model.max_seq_len * fp32;
  b.total = stage_total(fullest);
  return b;
}

hardware hardware_of(const job_config& cfg, double device_tflops) {
  hardware hw;
  const auto& c = cfg.cluster;
  if (device_tflops > 0)
    hw.device_tflops = device_tflops;
  if (c.intra_node_gbps > 0)
    hw.intra_node_gbps = c.intra_node_gbps;
  if (c.intra_rack_gbps > 0)
    hw.inter_node_gbps = c.intra_rack_gbps;
  else if (c.expected_bandwidth_gbps > 0)
    hw.inter_node_gbps = c.expected_bandwidth_gbps;
  return hw;
}

namespace {

step_estimate estimate(const job_config& cfg, const parallel_layout& l,
                       const hardware& hw, const capacity_plan& plan) {
  const shapes x = shapes_of(cfg, l);
  const double world = static_cast<double>(l.tp * l.pp * l.dp);
  step_estimate e;
  // Forward is a third of forward + backward; recomputation repeats it
  // (selective: the attention core's share only).
  double flops = plan.flops_per_step / world;
  const double attention_share = 2.0 * 2 * x.hq * l.tp * x.hd * x.s / 2
                                 / (plan.flops_per_token / 3 + 1);
  if (l.recompute == recompute_mode::full)
    flops *= 4.0 / 3;
  else if (l.recompute == recompute_mode::selective)
    flops *= 1 + attention_share / 3;
  e.compute_s = flops / (hw.device_tflops * 1e12);
  const double p = l.pp, m = l.micro_batches;
  e.bubble = (p - 1) / (m + p - 1);
  const double pipelined = e.compute_s / (1 - e.bubble);

  auto seconds = [](double bytes, double gbps) {
    return bytes * 8 / (gbps * 1e9);
  };
  const int64_t per_node = cfg.cluster.nproc_per_node;
  const double tensor = x.n * x.d * fp32; // one micro-batch's hidden states
  double comm = 0;
  if (l.tp > 1) // 2 all-reduces forward, 2 backward per layer, ring
    comm += 4 * x.layers * m
            * seconds(2.0 * (l.tp - 1) / l.tp * tensor,
                      l.tp <= per_node ? hw.intra_node_gbps
                                       : hw.inter_node_gbps);
  if (l.ep > 1) // dispatch + combine, forward + backward
    comm += 4 * x.layers * m
            * seconds(x.recv * x.d * fp32 * (l.ep - 1) / l.ep,
                      l.ep * l.tp <= per_node ? hw.intra_node_gbps
                                              : hw.inter_node_gbps);
  if (l.pp > 1) // activations forward, their gradients backward
    comm += 2 * (m + p - 1) * seconds(tensor, hw.inter_node_gbps);
  // Gradient reduction (reduce-scatter + all-gather when sharded moves
  // the same bytes) overlaps the last micro-batch's backward.
  const double grads = (x.layers * x.dense_layer + x.v * x.d) * fp32;
  const double edp = static_cast<double>(l.dp) / l.ep;
  double dp_s = 0;
  if (l.dp > 1)
    dp_s += seconds(2.0 * (l.dp - 1) / l.dp * grads,
                    l.dp * l.tp * l.pp <= per_node ? hw.intra_node_gbps
                                                   : hw.inter_node_gbps);
  if (edp > 1)
    dp_s += seconds(2.0 * (edp - 1) / edp * x.layers * x.expert_layer * fp32,
                    hw.inter_node_gbps);
  comm += std::max(0.0, dp_s - e.compute_s / m * 2 / 3);
  e.exposed_comm_s = comm;
  e.step_s = pipelined + comm;
  return e;
}

} // namespace

step_estimate estimate_step(const job_config& cfg, const parallel_layout& l,
                            const hardware& hw) {
  return estimate(cfg, l, hw, make_capacity_plan(cfg));
}

std::vector<layout_choice> search_layouts(const job_config& cfg,
                                          const hardware& hw,
                                          int64_t& considered) {
  std::vector<layout_choice> out;
  considered = 0;
  const auto& c = cfg.cluster;
  const auto& m = cfg.model;
  const int64_t world = c.world_size, E = cfg.moe.num_experts;
  const double budget = c.device_memory_gb * 1e9;
  const auto plan = make_capacity_plan(cfg); // FLOPs, once
  for (int64_t tp = 1; tp <= std::min<int64_t>(8, c.nproc_per_node); tp *= 2) {
    if (m.num_attention_heads % tp != 0 || m.intermediate_size % tp != 0
        || (m.num_key_value_heads % tp != 0 && tp % m.num_key_value_heads != 0))
      continue;
    for (int64_t pp = 1; pp <= std::min<int64_t>(64, m.num_hidden_layers);
         pp *= 2) {
      // Training refuses stages of unequal layer counts.
      if (pp > 1 && m.num_hidden_layers % pp != 0)
        break;
      if (world % (tp * pp) != 0)
        continue;
      const int64_t dp = world / (tp * pp);
      if (cfg.train.global_batch_size % dp != 0)
        continue;
      const int64_t per_dp = cfg.train.global_batch_size / dp;
      for (int64_t ep = 1; ep <= std::min(E, dp); ep *= 2) {
        if (E % ep != 0 || dp % ep != 0)
          continue;
        for (int64_t micro = 1; micro <= std::min<int64_t>(per_dp, 256);
             micro *= 2) {
          if (per_dp % micro != 0)
            continue;
          for (auto rc : {recompute_mode::none, recompute_mode::selective,
                          recompute_mode::full})
            for (bool shard : {false, true}) {
              // Training refuses TP with the distributed optimizer.
              if (shard && (dp == 1 || tp > 1))
                continue;
              ++considered;
              parallel_layout l{tp, pp, ep, dp, micro, rc, shard};
              auto mem = plan_memory(cfg, l);
              if (mem.total > budget)
                continue;
              out.push_back({l, mem, estimate(cfg, l, hw, plan)});
            }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.step.step_s < b.step.step_s;
  });
  return out;
}

std::string layout_text(const parallel_layout& l) {
  return "TP" + std::to_string(l.tp) + " PP" + std::to_string(l.pp) + " EP"
         + std::to_string(l.ep) + " DP" + std::to_string(l.dp) + " m"
         + std::to_string(l.micro_batches) + " recompute "
         + to_string(l.recompute)
         + (l.optimizer_sharding ? " sharded-optimizer" : "");
}

} // namespace tutti::train
