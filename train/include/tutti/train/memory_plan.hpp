#pragma once
// Per-rank memory by component for a parallel layout, from the shapes the
// engine allocates (rank_model, the expert shard, the dispatch buffers),
// and a step-time estimate from FLOPs and link bandwidths: what `tutti
// plan` prints and what `tutti plan --search` ranks layouts by.
//
// Tensor parallelism is planned as the engine runs it: heads (query and
// KV) and the experts' FFN split over TP, the embedding and LM head
// replicated, no sequence parallelism (the [tokens, hidden] activations
// whole on every TP rank), the checkpoint gathering TP slices on TP rank 0.
// Pipeline parallelism is planned as the engine runs it: each stage holds
// only its layers' weights, gradients, AdamW moments and experts (the
// first the embedding, the last the final norm and LM head); a stage's
// layers' activations kept for up to (stages - its index) micro-batches
// (1F1B); the LM head's buffers on every stage, its logits' gradient on
// the last; stage 0's ranks receive the later stages' layers and take the
// checkpoint copies of the whole model. The two combine (TP·PP): each
// stage holds its TP rank's slices of its layers. Stages may hold unequal
// layer counts (cluster_config.pipeline_layers); the search splits layers
// so the fullest stage is as small as it can be.
//
// Training state is counted in train.precision's dtypes: parameters and
// gradients, master weights where parameters are bf16 and master weights
// fp32, the two AdamW moments; with the distributed optimizer the dense
// master weights and moments are sharded over data parallel (the experts'
// are not, as the engine runs it). Activations, working and dispatch
// buffers are counted in the parameters' dtype (the GPU convention: bf16
// parameters, bf16 compute). A model preset's shape details
// (job_config::preset: MLA, shared experts, leading dense layers, an
// explicit head width) are counted where set.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/config/job_config.hpp"

namespace tutti::train {

struct parallel_layout {
  int64_t tp = 1, pp = 1, ep = 1, dp = 1; // dp = world / (tp * pp)
  int64_t micro_batches = 1;
  recompute_mode recompute = recompute_mode::none;
  bool optimizer_sharding = false;
  std::vector<int64_t> stage_layers; // layers per stage; empty = equal
  int64_t virtual_stages = 1; // model chunks per stage (interleaved 1F1B)
  bool keep_expert_activations = false; // train.keep_expert_activations
};

// The layout a config asks for.
parallel_layout layout_of(const job_config& cfg);

// One layer's parameters on a rank of tensor parallel `tp` and expert
// parallel `ep`: the dense ones (attention, norms, router, shared experts
// or a leading layer's dense FFN) and the rank's routed experts';
// `per_expert` is one routed expert's (0 in a dense layer).
struct layer_params {
  double dense = 0, experts = 0, per_expert = 0;
};
layer_params params_of_layer(const job_config& cfg, int64_t layer, int64_t tp,
                             int64_t ep);

// The head width attention works in (MLA's query-key width, else
// model.head_dim).
double head_dim_of(const job_config& cfg);

// Layers per stage for `l` that make the fullest stage smallest (the
// first stage's embedding and in-flight micro-batches, the last's head).
std::vector<int64_t> balanced_stage_layers(const job_config& cfg,
                                           const parallel_layout& l);

// Bytes per rank, the fullest rank (pipeline: the first or the last stage,
// whichever holds more).
struct memory_breakdown {
  double weights = 0, gradients = 0;
  double master_weights = 0; // fp32 copy of bf16 parameters (dense / dp if sharded)
  double optimizer = 0;         // AdamW moments (the dense ones / dp if sharded)
  double optimizer_scratch = 0; // the experts' second set (restart in place)
  double activations_micro = 0; // kept for backward by one micro-batch
  // What the attention core keeps for backward, per layer and micro-batch
  // (part of activations, or of working with recomputation): each row's
  // log-sum-exp where attention is tiled (CUDA, and the CPU above
  // kernels::kAttentionTiledAbove tokens), else the [s, s] probabilities.
  double attention_saved_per_layer = 0;
  bool attention_tiled = false;
  double in_flight = 1;         // micro-batches whose activations are kept
  double activations = 0; // in_flight micro-batches' and the shard's saved rows
  double working = 0; // backward scratch, recompute's shared layer, LM head
  double dispatch = 0;   // all-to-all buffers, the replay log of expert work
  // Dropless routing across EP ranks (capacity_factor 0): the plan takes
  // each rank's experts to receive the balanced share of rows; this is
  // what 1.5 times that share would add to the total (0 where capacity
  // bounds the rows, or without EP).
  double rows_half_again = 0;
  double checkpoint = 0; // host copies while a checkpoint is taken: rank 0
  double checkpoint_other = 0; // another rank's, the largest (its experts)
  double checkpoint_others = 0; // every other rank's together
  // elastic.replica_interval_steps: the in-memory copies of ranks' state
  // a node keeps, its own ranks' and a peer node's, at the peak three
  // steps of each (two kept, one being made; host memory): node 0's (it
  // holds rank 0's dense state), and every node's together.
  double replicas = 0;
  double replicas_all_nodes = 0;
  double kv_cache_per_sequence = 0; // serving, at model.max_seq_len
  double total = 0; // everything but the KV cache
  double total_all_stages = 0; // one rank of each pipeline stage together
  int64_t stages = 1;          // pipeline stages
  int64_t fullest_stage = 0;   // whose numbers these are
};

memory_breakdown plan_memory(const job_config& cfg, const parallel_layout& l);

// Device and link speeds for the step-time estimate.
struct hardware {
  double device_tflops = 400;  // sustained fp32-accumulate GEMM rate
  double intra_node_gbps = 3600; // NVLink-class
  double inter_node_gbps = 400;  // one NIC per device
};

// From the config's link keys where set (intra_node_gbps, intra_rack_gbps,
// expected_bandwidth_gbps), else the defaults above.
hardware hardware_of(const job_config& cfg, double device_tflops);

struct step_estimate {
  double compute_s = 0;       // FLOPs of the step (with recomputation)
  double bubble = 0;          // (p - 1) / (m + p - 1)
  double exposed_comm_s = 0;  // TP, EP, PP traffic and the DP tail
  double step_s = 0;
};

step_estimate estimate_step(const job_config& cfg, const parallel_layout& l,
                            const hardware& hw);

struct layout_choice {
  parallel_layout layout;
  memory_breakdown memory;
  step_estimate step;
};

// Every layout (TP, PP, EP, DP, micro-batches, recomputation, optimizer
// sharding) the cluster and model admit whose total fits
// cluster_config.device_memory_gb, fastest first; `considered` counts all.
std::vector<layout_choice> search_layouts(const job_config& cfg,
                                          const hardware& hw,
                                          int64_t& considered);

std::string layout_text(const parallel_layout& l);

// The config keys that ask for `l`, as flow YAML: "cluster_config:
// {...}, train: {...}", with cfg's train.precision where it is not fp32.
std::string layout_keys_text(const job_config& cfg, const parallel_layout& l);

// "params bf16, grads bf16, master weights fp32, moments fp32".
std::string precision_text(const job_config& cfg);

} // namespace tutti::train
