// Checks across keys, in the order a reader meets the keys. Each key is
// already within its own declared rules (field_checks.cpp).

#include <algorithm>

#include "checks.hpp"

namespace tutti::config {
namespace {

status require(bool ok, const std::string& key, const std::string& why) {
  return ok ? status() : status::error(key + ": " + why);
}

std::string text(int64_t x) { return std::to_string(x); }

status check_cluster(const cluster_config& cl) {
  TUTTI_RETURN_IF_ERROR(require(
    cl.world_size == cl.nnodes * cl.nproc_per_node, "cluster_config.world_size",
    "must equal nnodes * nproc_per_node (" + text(cl.nnodes) + " * "
      + text(cl.nproc_per_node) + " = " + text(cl.nnodes * cl.nproc_per_node)
      + "), got " + text(cl.world_size)));
  TUTTI_RETURN_IF_ERROR(require(cl.backend() != backend_kind::nccl
                                  || cl.device == compute_device::cuda,
                                "cluster_config.communication_backend",
                                "nccl needs cluster_config.device: cuda"));
  TUTTI_RETURN_IF_ERROR(
    require(cl.coordinator_port() > 0 && cl.coordinator_port() < 65536
              && !cl.coordinator_host().empty(),
            "cluster_config.coordinator",
            "must be host:port, got '" + cl.coordinator + "'"));
  TUTTI_RETURN_IF_ERROR(require(
    cl.nodes.empty() || static_cast<int64_t>(cl.nodes.size()) == cl.nnodes,
    "cluster_config.nodes",
    "lists " + std::to_string(cl.nodes.size()) + " nodes but nnodes is "
      + text(cl.nnodes)));
  for (std::size_t i = 0; i < cl.nodes.size(); ++i)
    TUTTI_RETURN_IF_ERROR(
      require(!cl.nodes[i].host.empty() && cl.nodes[i].port > 0
                && cl.nodes[i].port < 65536,
              "cluster_config.nodes[" + std::to_string(i) + "]",
              "needs host and a port in 1..65535"));
  const auto tp = cl.tensor_model_parallel_size;
  TUTTI_RETURN_IF_ERROR(require(
    cl.world_size % tp == 0, "cluster_config.tensor_model_parallel_size",
    "must divide world_size " + text(cl.world_size) + ", got " + text(tp)));
  const auto pp = cl.pipeline_model_parallel_size;
  TUTTI_RETURN_IF_ERROR(require(
    cl.world_size % (tp * pp) == 0,
    "cluster_config.pipeline_model_parallel_size",
    "times tensor_model_parallel_size must divide world_size "
      + text(cl.world_size) + ", got " + text(pp)));
  // Experts are spread over the data-parallel ranks of one TP index of one
  // pipeline stage.
  const auto dp = cl.world_size / (tp * pp);
  return require(cl.ep_size >= 1 && dp % cl.ep_size == 0,
                 "cluster_config.ep_size",
                 tp * pp == 1
                   ? "must divide world_size " + text(cl.world_size) + ", got "
                       + text(cl.ep_size)
                   : "must divide the data-parallel size world_size / "
                     "(tensor_model_parallel_size * "
                     "pipeline_model_parallel_size) "
                       + text(dp) + ", got " + text(cl.ep_size));
}

std::string list_text(const std::vector<int64_t>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i ? ", " : "") + text(xs[i]);
  return out + "]";
}

// The stages' layer counts: a list, or first/last counts with the other
// stages sharing the rest equally, or equal stages.
status check_stage_layers(const job_config& c) {
  const auto& cl = c.cluster;
  const auto pp = c.pp_size(), layers = c.model.num_hidden_layers;
  const auto first = cl.pipeline_first_stage_layers,
             last = cl.pipeline_last_stage_layers;
  if (!cl.pipeline_layers.empty()) {
    const std::string key = "cluster_config.pipeline_layers";
    const auto& xs = cl.pipeline_layers;
    const auto v = cl.pipeline_virtual_stages;
    int64_t sum = 0;
    for (auto n : xs)
      sum += n;
    TUTTI_RETURN_IF_ERROR(require(
      static_cast<int64_t>(xs.size()) == pp * v, key,
      v == 1 ? "lists " + text(static_cast<int64_t>(xs.size()))
                 + " stages but pipeline_model_parallel_size is " + text(pp)
             : "lists " + text(static_cast<int64_t>(xs.size()))
                 + " chunks but pipeline_model_parallel_size x "
                   "pipeline_virtual_stages is "
                 + text(pp * v)));
    TUTTI_RETURN_IF_ERROR(
      require(*std::min_element(xs.begin(), xs.end()) >= 1, key,
              "every stage needs a layer, got " + list_text(xs)));
    TUTTI_RETURN_IF_ERROR(require(
      sum == layers, key,
      list_text(xs) + " sums to " + text(sum)
        + ", but model.num_hidden_layers is " + text(layers)));
    return require(first == 0 && last == 0, key,
                   "set it or pipeline_first/last_stage_layers, not both");
  }
  const auto shared = pp - (first > 0) - (last > 0);
  const auto rest = layers - first - last;
  TUTTI_RETURN_IF_ERROR(require(
    pp > 1 || (first == 0 && last == 0),
    first > 0 ? "cluster_config.pipeline_first_stage_layers"
              : "cluster_config.pipeline_last_stage_layers",
    "needs pipeline_model_parallel_size > 1"));
  if (shared == 0)
    return require(rest == 0, "cluster_config.pipeline_last_stage_layers",
                   "first and last stage layers must sum to "
                   "model.num_hidden_layers (" + text(layers) + ")");
  return require(
    rest >= shared && rest % shared == 0,
    first + last > 0 ? "cluster_config.pipeline_first_stage_layers"
                     : "cluster_config.pipeline_model_parallel_size",
    (first + last > 0
       ? "leaves " + text(rest) + " layers for " + text(shared)
           + " stages, not a whole number each"
       : text(pp) + " must divide model.num_hidden_layers (" + text(layers)
           + ") for equal stages")
      + "; cluster_config.pipeline_layers lists uneven stages");
}

// Interleaved stages: equal chunks, and micro-batches in groups of pp (the
// schedule runs each chunk over pp micro-batches before the next chunk).
status check_virtual_stages(const job_config& c) {
  const auto& cl = c.cluster;
  const auto v = cl.pipeline_virtual_stages, pp = c.pp_size();
  const auto layers = c.model.num_hidden_layers;
  if (v == 1)
    return {};
  const std::string key = "cluster_config.pipeline_virtual_stages";
  TUTTI_RETURN_IF_ERROR(
    require(pp > 1, key, text(v) + " needs pipeline_model_parallel_size > 1"));
  TUTTI_RETURN_IF_ERROR(require(
    cl.pipeline_first_stage_layers == 0 && cl.pipeline_last_stage_layers == 0,
    key,
    text(v) + " takes its chunks' layers from pipeline_layers (one count "
              "a chunk), not from pipeline_first/last_stage_layers"));
  TUTTI_RETURN_IF_ERROR(require(
    !cl.pipeline_layers.empty() || layers % (pp * v) == 0, key,
    text(v) + " chunks on each of " + text(pp)
      + " stages must divide model.num_hidden_layers (" + text(layers)
      + "), or pipeline_layers lists the chunks' layers"));
  TUTTI_RETURN_IF_ERROR(require(
    c.train.micro_batches % pp == 0, "train.micro_batches",
    text(c.train.micro_batches) + " must be a multiple of "
      "pipeline_model_parallel_size (" + text(pp)
      + ") for interleaved stages (pipeline_virtual_stages " + text(v) + ")"));
  return require(cl.device == compute_device::cpu, key,
                 text(v) + " runs on cluster_config.device cpu only yet "
                           "(the interleaved schedule's point-to-point "
                           "sends have no CUDA path)");
}

// What pipeline parallelism needs of the model, and the features it does
// not combine with yet (refused rather than silently wrong).
status check_pipeline_parallel(const job_config& c) {
  TUTTI_RETURN_IF_ERROR(check_stage_layers(c));
  TUTTI_RETURN_IF_ERROR(check_virtual_stages(c));
  if (c.pp_size() == 1)
    return {};
  // The stages of one data-parallel index read the same windows; rack
  // affinity would deal each stage's by the racks of its own EP group.
  return require(!c.data.rack_affinity,
                 "cluster_config.pipeline_model_parallel_size",
                 "> 1 does not combine with data.rack_affinity yet");
}

// What tensor parallelism needs of the model, and the features it does
// not combine with yet (refused rather than silently wrong).
status check_tensor_parallel(const job_config& c) {
  const auto tp = c.tp_size();
  if (tp == 1)
    return {};
  const std::string key = "cluster_config.tensor_model_parallel_size";
  TUTTI_RETURN_IF_ERROR(require(
    c.model.num_key_value_heads % tp == 0, key,
    text(tp) + " must divide model.num_key_value_heads ("
      + text(c.model.num_key_value_heads) + "): attention splits by head"));
  TUTTI_RETURN_IF_ERROR(require(
    c.model.intermediate_size % tp == 0, key,
    text(tp) + " must divide model.intermediate_size ("
      + text(c.model.intermediate_size) + "): experts split their FFN"));
  TUTTI_RETURN_IF_ERROR(require(
    c.model.vocab_size % tp == 0, key,
    text(tp) + " must divide model.vocab_size ("
      + text(c.model.vocab_size)
      + "): the embedding and LM head split by vocabulary"));
  TUTTI_RETURN_IF_ERROR(
    require(c.model.dense_intermediate_size % tp == 0, key,
            text(tp) + " must divide model.dense_intermediate_size ("
              + text(c.model.dense_intermediate_size)
              + "): the dense layers split their MLP"));
  return require(!c.data.rack_affinity, key,
                 "> 1 does not combine with data.rack_affinity yet");
}

status check_recovery(const job_config& c) {
  const auto& r = c.recovery;
  const auto collective = c.cluster.collective_timeout_ms;
  const std::string order =
    "): timeouts are ordered heartbeat < collective < rendezvous";
  TUTTI_RETURN_IF_ERROR(
    require(r.heartbeat_timeout_ms > r.heartbeat_interval_ms,
            "recovery.heartbeat_timeout_ms",
            "must be longer than recovery.heartbeat_interval_ms ("
              + text(r.heartbeat_interval_ms) + ")"));
  TUTTI_RETURN_IF_ERROR(require(
    r.heartbeat_timeout_ms < collective, "recovery.heartbeat_timeout_ms",
    "must be shorter than cluster_config.collective_timeout_ms ("
      + text(collective) + order));
  TUTTI_RETURN_IF_ERROR(require(
    collective < r.rendezvous_timeout_ms, "recovery.rendezvous_timeout_ms",
    "must be longer than cluster_config.collective_timeout_ms ("
      + text(collective) + order));
  TUTTI_RETURN_IF_ERROR(require(c.elastic.min_nodes <= c.cluster.nnodes,
                                "elastic.min_nodes",
                                "must be at most cluster_config.nnodes ("
                                  + text(c.cluster.nnodes) + ")"));
  TUTTI_RETURN_IF_ERROR(require(
    c.metrics.port >= 0 && c.metrics.port + c.cluster.nnodes - 1 <= 65535,
    "metrics.port",
    "must be 0 (off) or leave room for one port per node below 65536"));
  // A shard restarts from its own step-start snapshot while its rank
  // replays the step; stopping healthy siblings with it would only make
  // them redo work (and race the ones still finishing a request).
  return require(c.supervision.expert_shard.strategy
                   == restart_strategy::one_for_one,
                 "supervision.expert_shard.strategy",
                 "must be one_for_one: each expert shard restarts alone from "
                 "its step-start snapshot");
}

// Multi-head latent attention's sizes (DeepSeek-V3's MLA).
status check_mla(const model_config& m) {
  const bool mla = m.mla();
  TUTTI_RETURN_IF_ERROR(
    require(mla
              || (m.q_lora_rank == 0 && m.qk_nope_head_dim == 0
                  && m.qk_rope_head_dim == 0 && m.v_head_dim == 0
                  && !m.rope_interleave),
            "model.kv_lora_rank",
            "must be > 0 with q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, "
            "v_head_dim or rope_interleave (multi-head latent attention)"));
  if (!mla)
    return {};
  TUTTI_RETURN_IF_ERROR(require(
    m.qk_rope_head_dim > 0 && m.qk_rope_head_dim % 2 == 0,
    "model.qk_rope_head_dim", "must be even and > 0 with kv_lora_rank"));
  TUTTI_RETURN_IF_ERROR(require(m.qk_nope_head_dim > 0,
                                "model.qk_nope_head_dim",
                                "must be > 0 with kv_lora_rank"));
  TUTTI_RETURN_IF_ERROR(require(
    m.v_head_dim > 0 && m.v_head_dim <= m.qk_head_dim(), "model.v_head_dim",
    "must be > 0 and <= qk_nope_head_dim + qk_rope_head_dim ("
      + text(m.qk_head_dim()) + ") with kv_lora_rank"));
  TUTTI_RETURN_IF_ERROR(require(
    m.num_key_value_heads == m.num_attention_heads, "model.num_key_value_heads",
    "must equal num_attention_heads with kv_lora_rank (every head has its "
    "own key and value)"));
  TUTTI_RETURN_IF_ERROR(require(!m.qk_norm(), "model.kv_lora_rank",
                                "must be 0 with QK-norm (model.family "
                                "qwen3_moe)"));
  return require(m.head_dim_size == 0, "model.head_dim",
                 "must be 0 with kv_lora_rank (qk_nope_head_dim + "
                 "qk_rope_head_dim and v_head_dim give the heads' sizes)");
}

status check_model(const model_config& m) {
  TUTTI_RETURN_IF_ERROR(require(m.family != model_family::deepseek_v3
                                  || m.mla(),
                                "model.kv_lora_rank",
                                "must be positive for model.family "
                                "deepseek_v3 (its multi-head latent "
                                "attention)"));
  TUTTI_RETURN_IF_ERROR(require(
    m.num_attention_heads % m.num_key_value_heads == 0,
    "model.num_attention_heads",
    "must be a multiple of num_key_value_heads (" + text(m.num_attention_heads)
      + " % " + text(m.num_key_value_heads) + " != 0)"));
  TUTTI_RETURN_IF_ERROR(check_mla(m));
  if (m.mla())
    return {};
  if (m.head_dim_size > 0)
    return require(m.head_dim_size % 2 == 0, "model.head_dim",
                   "must be even for rotary embedding");
  TUTTI_RETURN_IF_ERROR(require(m.hidden_size % m.num_attention_heads == 0,
                                "model.hidden_size",
                                "must be a multiple of num_attention_heads"));
  return require(m.head_dim() % 2 == 0, "model.hidden_size",
                 "head dimension (hidden_size / num_attention_heads) must be "
                 "even for rotary embedding");
}

// DeepSeek-V3's shared experts and leading dense layers.
status check_feed_forward(const job_config& c) {
  const auto& e = c.moe;
  const auto layers = c.model.num_hidden_layers;
  TUTTI_RETURN_IF_ERROR(require(
    e.first_k_dense_replace < layers, "moe_config.first_k_dense_replace",
    "must be < model.num_hidden_layers (" + text(e.first_k_dense_replace)
      + " >= " + text(layers) + "): at least one MoE layer"));
  return require(e.first_k_dense_replace == 0
                   || c.model.dense_intermediate_size > 0,
                 "model.dense_intermediate_size",
                 "must be set (> 0) with moe_config.first_k_dense_replace > 0");
}

// DeepSeek-V3's router: groups of experts, sigmoid scores.
status check_router_groups(const moe_config& e) {
  const bool sigmoid = e.scoring == scoring_func::sigmoid;
  TUTTI_RETURN_IF_ERROR(require(e.n_group == 1 || sigmoid, "moe_config.n_group",
                                "> 1 needs scoring_func sigmoid"));
  TUTTI_RETURN_IF_ERROR(require(e.routed_scaling_factor == 1.0 || sigmoid,
                                "moe_config.routed_scaling_factor",
                                "!= 1 needs scoring_func sigmoid"));
  TUTTI_RETURN_IF_ERROR(require(
    !sigmoid || e.aux_loss_coeff == 0.0, "moe_config.aux_loss_coeff",
    "must be 0 with scoring_func sigmoid (the Switch loss is over softmax "
    "probabilities; balance with bias_update_rate)"));
  TUTTI_RETURN_IF_ERROR(require(!sigmoid || e.router_temperature == 1.0,
                                "moe_config.router_temperature",
                                "must be 1 with scoring_func sigmoid"));
  TUTTI_RETURN_IF_ERROR(
    require(e.num_experts % e.n_group == 0, "moe_config.n_group",
            "must divide num_experts (" + text(e.num_experts) + " % "
              + text(e.n_group) + " != 0)"));
  TUTTI_RETURN_IF_ERROR(require(e.topk_group <= e.n_group,
                                "moe_config.topk_group",
                                "must be <= n_group (" + text(e.topk_group)
                                  + " > " + text(e.n_group) + ")"));
  const int64_t reachable = e.topk_group * (e.num_experts / e.n_group);
  return require(e.router_top_k <= reachable, "moe_config.router_top_k",
                 "must be <= topk_group * num_experts / n_group ("
                   + text(e.router_top_k) + " > " + text(reachable) + ")");
}

status check_moe(const job_config& c) {
  const auto& e = c.moe;
  const auto ep = c.cluster.ep_size;
  TUTTI_RETURN_IF_ERROR(
    require(e.router_top_k <= e.num_experts, "moe_config.router_top_k",
            "must be <= num_experts (" + text(e.router_top_k) + " > "
              + text(e.num_experts) + ")"));
  TUTTI_RETURN_IF_ERROR(require(
    e.norm_topk_prob || c.model.family == model_family::qwen3_moe
      || e.scoring == scoring_func::sigmoid,
    "moe_config.norm_topk_prob",
    "false needs model.family qwen3_moe or scoring_func sigmoid (Mixtral "
    "renormalises its gates)"));
  TUTTI_RETURN_IF_ERROR(check_router_groups(e));
  TUTTI_RETURN_IF_ERROR(
    require(e.num_experts % ep == 0, "moe_config.num_experts",
            "must be divisible by ep_size (" + text(e.num_experts) + " % "
              + text(ep) + " != 0)"));
  TUTTI_RETURN_IF_ERROR(require(
    !c.data.rack_affinity || !e.placement.empty(), "data.rack_affinity",
    "needs moe_config.placement with token_experts (tutti placement plan "
    "--method affinity --model EXPORT_DIR)"));
  TUTTI_RETURN_IF_ERROR(require(!c.data.rack_affinity || !c.data.shard_per_rank,
                                "data.rack_affinity",
                                "deals the global batch; data.shard_per_rank "
                                "gives each rank its own shards"));
  return require(e.all_to_all_communication == all_to_all_mode::enabled
                   || ep == 1,
                 "moe_config.all_to_all_communication",
                 "is disabled, which needs ep_size 1 (experts cannot be "
                 "spread)");
}

status check_train(const job_config& c) {
  const auto& t = c.train;
  // Ranks of one TP index and the stages of one pipeline share their
  // tokens: batches split over the data-parallel ranks.
  const auto world = c.dp_size();
  const std::string dp = "the data-parallel size (world_size / (tensor x "
                         "pipeline parallel size) = "
                         + text(world) + ")";
  TUTTI_RETURN_IF_ERROR(require(t.seq_len <= c.model.max_seq_len,
                                "train.seq_len",
                                "must be <= model.max_seq_len"));
  TUTTI_RETURN_IF_ERROR(
    require(t.global_batch_size % world == 0, "train.global_batch_size",
            "must be divisible by " + dp + ", " + text(t.global_batch_size)
              + " is not"));
  TUTTI_RETURN_IF_ERROR(
    require((t.global_batch_size / world) % t.micro_batches == 0,
            "train.micro_batches",
            "must divide the per-rank batch (global_batch_size / "
            "data-parallel size = "
              + text(t.global_batch_size / world) + "), got "
              + text(t.micro_batches)));
  TUTTI_RETURN_IF_ERROR(require(t.min_lr >= 0 && t.min_lr <= t.lr,
                                "train.min_lr", "must be in [0, lr]"));
  TUTTI_RETURN_IF_ERROR(require(c.moe.dispatch == dispatch_dtype::fp32
                                  || c.cluster.device == compute_device::cpu,
                                "moe_config.dispatch_dtype",
                                std::string(to_string(c.moe.dispatch))
                                  + " needs cluster_config.device: cpu"));
  TUTTI_RETURN_IF_ERROR(require(
    t.precision.master_weights == storage_dtype::fp32
      || t.precision.params == storage_dtype::bf16,
    "train.precision.master_weights",
    "bf16 under fp32 params would round the weights the optimizer "
    "updates; set params: bf16 too, or master_weights: fp32"));
  return require(t.eval_sequences >= 0 && t.eval_sequences % world == 0,
                 "train.eval_sequences",
                 "must be >= 0 and divisible by " + dp);
}

status check_security(const security_config& s) {
  const auto& t = s.tls;
  const bool any = !t.ca.empty() || !t.cert.empty() || !t.key.empty();
  const bool all = !t.ca.empty() && !t.cert.empty() && !t.key.empty();
  TUTTI_RETURN_IF_ERROR(
    require(!any || all, "security.tls", "needs all of ca, cert and key"));
  return require(!s.required || all, "security.required",
                 "is true, so security.tls (ca, cert, key) must be set; "
                 "not starting without it");
}

} // namespace

status check_across_keys(const job_config& c) {
  TUTTI_RETURN_IF_ERROR(check_cluster(c.cluster));
  TUTTI_RETURN_IF_ERROR(check_recovery(c));
  TUTTI_RETURN_IF_ERROR(check_model(c.model));
  TUTTI_RETURN_IF_ERROR(check_feed_forward(c));
  TUTTI_RETURN_IF_ERROR(check_tensor_parallel(c));
  TUTTI_RETURN_IF_ERROR(check_pipeline_parallel(c));
  TUTTI_RETURN_IF_ERROR(check_moe(c));
  TUTTI_RETURN_IF_ERROR(check_train(c));
  return check_security(c.security);
}

} // namespace tutti::config
