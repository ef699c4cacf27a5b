// plan_memory mirrors what the engine allocates (rank_model's constructor
// and scratch, expert_ffn's saved rows, the shard executor's replay log,
// the dispatch buffers), stage by stage; layout_search.cpp ranks layouts.

#include "tutti/train/memory_plan.hpp"

#include <algorithm>
#include <cmath>

#include "plan_shapes.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/pipeline_order.hpp"

namespace tutti::train {

namespace {

// A preset's shape, with the model's own multi-head latent attention keys
// where it sets them (model.kv_lora_rank > 0).
preset_shape plan_shape_of(const job_config& cfg) {
  auto p = cfg.preset;
  const auto& m = cfg.model;
  if (m.mla()) {
    p.q_lora_rank = m.q_lora_rank;
    p.kv_lora_rank = m.kv_lora_rank;
    p.qk_nope_head_dim = m.qk_nope_head_dim;
    p.qk_rope_head_dim = m.qk_rope_head_dim;
    p.v_head_dim = m.v_head_dim;
  }
  return p;
}

} // namespace

double head_dim_of(const job_config& cfg) {
  const auto p = plan_shape_of(cfg);
  if (p.kv_lora_rank > 0)
    return static_cast<double>(p.qk_nope_head_dim + p.qk_rope_head_dim);
  return static_cast<double>(cfg.model.head_dim());
}

layer_params params_of_layer(const job_config& cfg, int64_t layer, int64_t tp,
                             int64_t ep) {
  const auto& m = cfg.model;
  const auto p = plan_shape_of(cfg);
  const double d = m.hidden_size, t = static_cast<double>(tp);
  const double hq = m.num_attention_heads / t, hkv = m.num_key_value_heads / t;
  double attention = 0;
  if (p.kv_lora_rank > 0) {
    // MLA: the down projections and their norms whole on every TP rank,
    // the per-head up projections and the output split.
    const double qk = static_cast<double>(p.qk_nope_head_dim
                                          + p.qk_rope_head_dim);
    const double ql = p.q_lora_rank, kvl = p.kv_lora_rank;
    attention = (ql > 0 ? d * ql + ql + ql * hq * qk : d * hq * qk)
                + d * (kvl + p.qk_rope_head_dim) + kvl
                + kvl * hq * (p.qk_nope_head_dim + p.v_head_dim)
                + hq * p.v_head_dim * d;
  } else {
    const double hd = head_dim_of(cfg);
    attention = d * hq * hd * 2 + d * hkv * hd * 2; // q, o, k, v
  }
  layer_params out;
  out.dense = 2 * d + attention; // and the two norms
  if (cfg.moe.dense_layer(layer)) {
    out.dense += 3 * d * static_cast<double>(m.dense_intermediate_size) / t;
    return out;
  }
  const double E = static_cast<double>(cfg.moe.num_experts);
  out.per_expert = 3 * d * static_cast<double>(m.intermediate_size) / t;
  out.dense += E * d
               + static_cast<double>(cfg.moe.n_shared_experts) * out.per_expert;
  out.experts = E / static_cast<double>(ep) * out.per_expert;
  return out;
}

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
  l.stage_layers = cfg.stage_layer_counts();
  l.virtual_stages = c.pipeline_virtual_stages;
  l.keep_expert_activations = cfg.train.keep_expert_activations;
  return l;
}

std::vector<int64_t> stage_counts(const job_config& cfg,
                                  const parallel_layout& l) {
  if (static_cast<int64_t>(l.stage_layers.size()) == l.pp)
    return l.stage_layers;
  const int64_t layers = cfg.model.num_hidden_layers;
  std::vector<int64_t> out(static_cast<size_t>(l.pp), layers / l.pp);
  for (int64_t i = 0; i < layers % l.pp; ++i) // later stages take the rest
    ++out[static_cast<size_t>(l.pp - 1 - i)];
  return out;
}

layer_sums::layer_sums(const job_config& cfg, int64_t tp, int64_t ep) {
  const auto layers = cfg.model.num_hidden_layers;
  dense.assign(static_cast<size_t>(layers + 1), 0);
  experts = dense;
  for (int64_t i = 0; i < layers; ++i) {
    const auto p = params_of_layer(cfg, i, tp, ep);
    dense[i + 1] = dense[i] + p.dense;
    experts[i + 1] = experts[i] + p.experts;
  }
}

stage_model::stage_model(const job_config& cfg, const parallel_layout& l,
                         double rows_share)
  : l_(l), x_(shapes_of(cfg, l)) {
  if (cfg.moe.capacity_factor <= 0)
    x_.recv *= rows_share;
  const auto& p = cfg.train.precision;
  auto size = [](storage_dtype t) {
    return t == storage_dtype::bf16 ? 2.0 : 4.0;
  };
  params_ = size(p.params);
  grads_ = size(p.grads);
  master_ = p.params == storage_dtype::bf16
                && p.master_weights == storage_dtype::fp32
              ? 4.0
              : 0.0;
  moments_ = 2 * size(p.moments);
  act_ = params_;
  restart_ = cfg.expert_restart_in_place();
  keep_experts_ = l.keep_expert_activations
                  && l.recompute != recompute_mode::full;
  const double d = x_.d, n = x_.n, nd = n * d;
  // No sequence parallelism: every TP rank holds the whole [tokens,
  // hidden] activations and runs the norms on all of them. The attention
  // core keeps what rank_model sizes: no [s, s] term where it is tiled,
  // whose backward needs one value per query row of scratch.
  const auto device = cfg.cluster.device == compute_device::cuda
                        ? kernels::device_kind::cuda
                        : kernels::device_kind::cpu;
  tiled_ = kernels::attention_is_tiled(device, cfg.train.seq_len);
  probs_ = x_.seqs * x_.hq
           * static_cast<double>(
             kernels::attention_saved_per_head(device, cfg.train.seq_len));
  const double layer_rest = 3 * nd + 2 * n + 2 * n * x_.hq * x_.hd
                            + 2 * n * x_.hkv * x_.hd + 2 * n * x_.E
                            + 4 * n * x_.K + x_.recv * d + 2 * x_.recv;
  per_layer_ = nd;
  switch (l.recompute) {
  case recompute_mode::none:
    per_layer_ += layer_rest + probs_;
    break;
  case recompute_mode::selective:
    per_layer_ += layer_rest;
    shared_ = probs_;
    break;
  case recompute_mode::full:
    shared_ = layer_rest + probs_;
    break;
  }
  scratch_ = 3 * nd + 2 * n * x_.hq * x_.hd + 2 * n * x_.hkv * x_.hd
             + n * x_.K + 3 * x_.recv * x_.f + x_.recv * d + 2 * n
             + (tiled_ ? n * x_.hq : 0);
  const double rows = cfg.moe.communication_buffer_size > 0
                        ? cfg.moe.communication_buffer_size / (d * act_)
                        : dispatch_rows(cfg, l, x_);
  dispatch_ = 3 * rows * d + n * x_.K * d + 2 * x_.recv * d;
}

stage_memory stage_model::at(int64_t stage, double layers, double dense,
                             double experts) const {
  const auto& x = x_;
  const double d = x.d, n = x.n, nd = n * d;
  const bool first = stage == 0, last = stage + 1 == l_.pp;
  const double own = dense + (first ? x.v * d : 0) + (last ? x.v * d + d : 0);
  const double shard = l_.optimizer_sharding ? static_cast<double>(l_.dp) : 1;
  stage_memory s;
  s.weights = (own + experts) * params_;
  s.gradients = (own + experts) * grads_;
  s.master = (own / shard + experts) * master_;
  s.optimizer = (own / shard + experts) * moments_;
  // The experts' second set of weights and optimizer state.
  s.scratch = restart_ ? experts * (params_ + master_ + moments_) : 0;
  // 1F1B: stage s keeps up to min(pp - s, m) micro-batches in flight (the
  // interleaved schedule more: pipeline_order.hpp), each its layers'
  // activations and each chunk's output but the last stage's last. The
  // expert shard keeps a layer's last forward only, or one for each
  // micro-batch in flight (train.keep_expert_activations).
  s.in_flight = static_cast<double>(micro_batches_in_flight(
    l_.pp, l_.virtual_stages, l_.micro_batches, stage));
  const double outputs = static_cast<double>(l_.virtual_stages - (last ? 1 : 0));
  const double kept = layers * per_layer_ + outputs * nd;
  const double shard_saved = layers * x.recv * (d + 3 * x.f);
  const double shard_copies = keep_experts_ ? s.in_flight : 1;
  s.micro = (kept + shard_saved) * act_;
  s.activations = (s.in_flight * kept + shard_copies * shard_saved) * act_;
  // The final norm, LM head logits and loss buffers are sized on every
  // stage; the logits' gradient only where the loss is, the last stage.
  const double head = 2 * nd + 2 * n + n * x.v
                      + (last ? n * std::max(x.v, x.E) : 0);
  // Interleaved stages keep a copy of each activation and gradient they
  // send until the step's end (interleaved_schedule.cpp): a chunk's
  // output but the last's, a chunk's input gradient but the first's.
  const double v = static_cast<double>(l_.virtual_stages);
  const double sends =
    v > 1 ? (2 * v - (last ? 1 : 0) - (stage == 0 ? 1 : 0))
              * static_cast<double>(l_.micro_batches)
          : 0;
  s.working = (shared_ + head + scratch_ + sends * nd) * act_;
  double dispatch = dispatch_;
  if (restart_) {
    // The shard executor copies each expert call's input for a replay:
    // forward and backward, every layer, every micro-batch of the step.
    const double calls = l_.recompute == recompute_mode::full ? 3 : 2;
    dispatch += calls * layers * l_.micro_batches * x.recv * d;
  }
  s.dispatch = dispatch * act_;
  s.total = s.weights + s.gradients + s.master + s.optimizer + s.scratch
            + s.activations + s.working + s.dispatch;
  return s;
}

namespace {

// The fullest stage under `model`: the first keeps the most micro-batches,
// the last the logits' gradient; uneven stages move it.
struct fullest_stage {
  stage_memory memory;
  int64_t stage = 0, first_layer = 0;
  double total_all_stages = 0; // one rank of each stage together
};

fullest_stage fullest_of(const stage_model& model, const job_config& cfg,
                         const parallel_layout& l) {
  const layer_sums sums(cfg, l.tp, l.ep);
  const auto counts = stage_counts(cfg, l);
  fullest_stage out;
  int64_t first = 0;
  // Interleaved: each stage's chunks, pp apart in virtual-stage order (the
  // config's list where the layout is the config's, else equal).
  const int64_t v = l.virtual_stages;
  const auto chunks =
    v > 1 && cfg.cluster.pipeline_virtual_stages == v && cfg.pp_size() == l.pp
      ? cfg.chunk_layer_counts()
      : std::vector<int64_t>(static_cast<size_t>(l.pp * v),
                             cfg.model.num_hidden_layers / (l.pp * v));
  for (int64_t stage = 0; stage < l.pp; ++stage) {
    const auto n = counts[static_cast<size_t>(stage)];
    double dense = 0, experts = 0;
    if (v == 1) {
      dense = sums.dense_in(first, first + n);
      experts = sums.experts_in(first, first + n);
    }
    for (int64_t k = 0, from = 0; v > 1 && k < l.pp * v; ++k) {
      const int64_t size = chunks[static_cast<size_t>(k)];
      if (k % l.pp == stage) {
        dense += sums.dense_in(from, from + size);
        experts += sums.experts_in(from, from + size);
      }
      from += size;
    }
    const auto s = model.at(stage, static_cast<double>(n), dense, experts);
    out.total_all_stages += s.total;
    if (stage == 0 || s.total > out.memory.total) {
      out.memory = s;
      out.stage = stage;
      out.first_layer = first;
    }
    first += n;
  }
  return out;
}

} // namespace

memory_breakdown plan_memory(const job_config& cfg, const parallel_layout& l) {
  const stage_model model(cfg, l);
  const shapes& x = model.shapes_in_use();
  const double d = x.d;
  const layer_sums sums(cfg, l.tp, l.ep);
  const auto counts = stage_counts(cfg, l);
  memory_breakdown b;
  b.stages = l.pp;
  const auto found = fullest_of(model, cfg, l);
  const auto& fullest = found.memory;
  const int64_t fullest_first = found.first_layer;
  b.fullest_stage = found.stage;
  b.total_all_stages = found.total_all_stages;
  b.weights = fullest.weights;
  b.gradients = fullest.gradients;
  b.master_weights = fullest.master;
  b.optimizer = fullest.optimizer;
  b.optimizer_scratch = fullest.scratch;
  b.in_flight = fullest.in_flight;
  b.activations_micro = fullest.micro;
  b.activations = fullest.activations;
  b.working = fullest.working;
  b.dispatch = fullest.dispatch;
  b.total = fullest.total;
  b.attention_tiled = model.tiled();
  // Dropless routing: the rows a rank's experts receive follow the router,
  // which the plan takes as balanced; what half as many again would add.
  if (cfg.moe.capacity_factor <= 0 && l.ep > 1)
    b.rows_half_again =
      fullest_of(stage_model(cfg, l, 1.5), cfg, l).memory.total - b.total;
  b.attention_saved_per_layer = model.probs() * model.act_bytes();

  // Rank 0 at a checkpoint: host copies of weights and moments in fp32
  // (the dense moments whole, gathered when sharded) and the experts' (the
  // shard's snapshot, which the rank's shares). Under PP stage 0's ranks
  // receive the later stages' layers tensor by tensor and write the whole
  // model.
  const int64_t layers = cfg.model.num_hidden_layers;
  const double dense = sums.dense_in(0, layers) + 2 * x.v * d + d;
  const double experts = sums.experts_in(0, layers);
  const auto n_fullest = counts[static_cast<size_t>(b.fullest_stage)];
  const double stage_experts =
    sums.experts_in(fullest_first, fullest_first + n_fullest);
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
    const layer_sums whole(cfg, 1, l.ep);
    const double dense_whole =
      whole.dense_in(0, layers)
      + 2 * static_cast<double>(cfg.model.vocab_size) * d + d;
    const double t = static_cast<double>(l.tp);
    const double gathering = 2 * t * snapshot, sending = 2 * snapshot;
    b.checkpoint_other = writers > 1 ? gathering : sending;
    b.checkpoint = 5 * dense_whole * fp32 + gathering;
    b.checkpoint_others = (writers - 1) * gathering + writers * (t - 1) * sending;
  }
  if (cfg.elastic.replica_interval_steps > 0 && cfg.cluster.nnodes > 1) {
    // A copy is what the rank's checkpoint shard holds: rank 0's dense
    // weights, moments and router biases with its experts; the experts of
    // each of the first ep data-parallel ranks; nothing of the others.
    // Each rank's own and one peer node's ranks': the three steps kept
    // (train/src/node/replica_store) and, at its peak, the one being made
    // before the oldest is dropped.
    const double rank0 = 3 * dense * fp32 + snapshot;
    const double per = static_cast<double>(cfg.cluster.nproc_per_node);
    const double expert_writers = std::min(per, writers);
    constexpr double steps_held = 4;
    b.replicas = steps_held * (rank0 + (2 * expert_writers - 1) * snapshot);
    b.replicas_all_nodes = steps_held * 2 * (rank0 + (writers - 1) * snapshot);
  }
  // The KV cache: MLA's latent and rotary key, else K and V per KV head.
  const auto p = plan_shape_of(cfg);
  const double per_token = p.kv_lora_rank > 0
                             ? static_cast<double>(p.kv_lora_rank
                                                   + p.qk_rope_head_dim)
                             : 2 * x.hkv * x.hd;
  b.kv_cache_per_sequence = static_cast<double>(layers) * per_token
                            * static_cast<double>(cfg.model.max_seq_len)
                            * model.act_bytes();
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

std::string precision_text(const job_config& cfg) {
  const auto& p = cfg.train.precision;
  return std::string("params ") + to_string(p.params) + ", grads "
         + to_string(p.grads) + ", master weights "
         + (p.params == storage_dtype::bf16
                && p.master_weights == storage_dtype::fp32
              ? "fp32"
              : "none")
         + ", moments " + to_string(p.moments);
}

} // namespace tutti::train
