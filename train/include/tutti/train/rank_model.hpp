#pragma once
// One rank's share of the model (Mixtral or Qwen3-MoE, with DeepSeek-V3's
// shared experts and leading dense layers as options): its pipeline stage's
// dense weights (all of them without PP) with their gradients and AdamW state,
// the activations of the current step, and the MoE plumbing (route, dispatch
// over the EP group, experts through an expert_executor, combine). Blocking:
// runs on the rank's own thread.
//
// Where it computes is the stream's device: every weight, moment and
// activation is a kernels::tensor there. What the host needs (routing
// counts, the dispatch plan) is copied to it, and the collectives go
// through staged_collectives, so a GPU model runs over NCCL or Gloo.

#include <cstdint>
#include <memory>
#include <vector>

#include "tutti/comm/communicator.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/kernels/tensor.hpp"
#include "tutti/train/adam_moments.hpp"
#include "tutti/train/expert_executor.hpp"
#include "tutti/train/mla_attention.hpp"
#include "tutti/model/param_layout.hpp"
#include "tutti/moe/staged_collectives.hpp"
#include "tutti/moe/token_exchange.hpp"
#include "tutti/train/stage_layout.hpp"
#include "tutti/train/step_stats.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti::train {

// The communicators one rank takes part in. dp: the data-parallel group,
// the ranks that see different tokens (every rank without tensor
// parallelism; with it, the ranks of this rank's TP index). ep may equal
// dp; expert_dp (ranks holding the same experts) and tp (the ranks that
// split this rank's weights, tensor_parallel.hpp) are null when they would
// have one member. With pipeline parallelism (pipeline_schedule.cpp) pp
// holds the stages of this rank's TP and dp index, prev and next the
// two-member links to the neighbouring stages (null at the ends); all null without.
struct comm_groups {
  comm::communicator* dp = nullptr;
  comm::communicator* ep = nullptr;
  comm::communicator* expert_dp = nullptr;
  comm::communicator* tp = nullptr;
  comm::communicator* pp = nullptr;
  comm::communicator* prev = nullptr;
  comm::communicator* next = nullptr;
};

// Learning rate at 1-based `step`: linear warmup, then cosine to min_lr.
double learning_rate(const train_config& t, int64_t step);

class rank_model {
public:
  // `s`: where the model lives and computes (the rank's device stream).
  // `slot_of_expert`: the placement, [layer][expert] -> slot of the EP
  // group (EP member slot / (experts / ep_size) holds it; see
  // placement::placement_plan); empty = contiguous, expert e in slot e.
  rank_model(const job_config& cfg, comm_groups comms, expert_executor& experts,
             kernels::stream s = kernels::cpu_stream(),
             std::vector<int32_t> slot_of_expert = {});

  // Forward and backward of one local batch ([seqs, seq_len] inputs and
  // targets, host memory) as train.micro_batches micro-batches in order,
  // each one's gradients added to the last's. Fills loss, aux, z, tokens,
  // dropped, expert counts and timers of `stats` (global values, over the
  // step's micro-batches).
  status train_step(const int32_t* inputs, const int32_t* targets, int64_t seqs,
                    step_stats& stats);

  // Forward only, micro-batch by micro-batch; returns global cross-entropy
  // sum and token count.
  status evaluate(const int32_t* inputs, const int32_t* targets, int64_t seqs,
                  double& loss_sum, int64_t& tokens, step_timers& time);

  // Sums dense gradients over the data-parallel group (all-reduce; with
  // train.optimizer_sharding a reduce-scatter: only this rank's optimizer
  // slice is summed); returns their global squared norm, over all stages,
  // summed piece by piece in the one-stage buffer's order whatever the
  // layout, so sharded or not, one stage or several give the same bits.
  status reduce_dense_grads(double& sum_squares, step_timers& time);

  // AdamW on the dense weights of this rank's optimizer slice with the
  // clipping factor (sharded: then all-gathers the weights); zeroes
  // gradients; applies the router-bias update from this step's global
  // counts.
  status apply_optimizer(int64_t step, double lr, double grad_scale);

  // The AdamW moments of every dense weight, in layout order, in host
  // memory, on world rank 0 (elsewhere left empty). Sharded, a gather over
  // world: every rank must call it.
  status full_moments(std::vector<float>& m, std::vector<float>& v);
  // Takes this rank's slice of full moments (layout order, host memory).
  void load_moments(const std::vector<float>& m, const std::vector<float>& v);
  // [first, first + count) of the dense buffer: the elements whose AdamW
  // state this rank holds (all of them unless sharded).
  int64_t optimizer_first() const { return opt_first_; }
  int64_t optimizer_count() const { return opt_count_; }

  const model::param_layout& layout() const { return layout_; }
  // The TP group (null without tensor parallelism); layout() then holds
  // this TP rank's slices (tensor_parallel.hpp).
  comm::communicator* tp_group() const { return comms_.tp; }
  // The stages of this rank's TP and dp index (null without pipeline
  // parallelism). Each stage holds, trains and updates only its own
  // tensors (stage_layout.hpp): layout() is the stage's.
  comm::communicator* pp_group() const { return comms_.pp; }
  const kernels::stream& stream() const { return stream_; }
  // On the model's device; checkpoints copy them with to_host / upload.
  kernels::tensor<float>& params() { return params_; }
  kernels::tensor<float>& grads() { return grads_; }
  kernels::tensor<float>& router_bias() { return router_bias_; }

private:
  template <class T>
  using tensor = kernels::tensor<T>;

  struct layer_acts {
    // attn_saved: what the attention core keeps for backward, the [s, s]
    // probabilities or, where attention is tiled, each row's log-sum-exp
    // (kernels::attention_is_tiled).
    tensor<float> x_in, xn1, rstd1, q, k, v, attn_saved, attn, x_mid, xn2,
      rstd2,
      logits, rprobs, gate, y_rows, fraction;
    // With QK-norm (model_config::qk_norm): q and k before their per-head
    // RMSNorm, and its saved reciprocal norms; empty without.
    tensor<float> q_pre, k_pre, rstd_q, rstd_k;
    // With multi-head latent attention (model_config::mla): its latents
    // (mla_attention.hpp) and the attention's output packed for o_proj
    // ([n, heads * v_head_dim]; attn is then [n, heads, qk_head_dim]).
    mla::acts<float> mla;
    tensor<float> attn_packed;
    // The layer's SwiGLU MLP on every token (a leading dense layer's, or
    // the shared experts'): w1's and w3's outputs and their SwiGLU, [n, F]
    // each with F this TP rank's width; empty without one.
    tensor<float> mlp_gate, mlp_up, mlp_h;
    // Pipeline: the experts' input rows, for running them again before
    // backward when a later micro-batch's forward came in between.
    tensor<float> expert_in;
    tensor<int32_t> topk_orig, topk_kept, slot_of_row;
    tensor<int64_t> kept;
    // The layer's exchange over the EP group: counts both ways, the way
    // back's chunks, and what the exchange keeps for the backward pass.
    moe::exchange_plan exchange;
    std::vector<int64_t> counts_global;
    int64_t rows = 0; // this rank's routed rows (dispatch order)
  };

  // The current chunk's layers of one micro-batch (all of them without
  // pipeline parallelism): from the embedding on the first stage's first
  // chunk, else from the received acts_[chunk().first].x_in; to the loss on
  // the last stage's last chunk, else into acts_[chunk().last].x_in.
  // Backward likewise from dx_ as received.
  status forward(const int32_t* inputs, const int32_t* targets, int64_t seqs,
                 double& ce_sum, step_stats* stats, step_timers& time);
  status backward(int64_t seqs, step_timers& time);

  // Pipeline parallelism (pipeline_schedule.cpp): the step's micro-batches
  // in 1F1B order; the step's sums over the stages; evaluation's forwards.
  bool first_stage() const { return stage_ == 0; }
  bool last_stage() const { return stage_ + 1 == stages_; }
  const layer_range& chunk() const { return layers_.chunks[chunk_]; }
  bool runs_embedding() const { return first_stage() && chunk_ == 0; }
  bool runs_head() const {
    return last_stage() && chunk_ + 1 == static_cast<int64_t>(chunks());
  }
  size_t chunks() const { return layers_.chunks.size(); }
  status pipeline_step(const int32_t* inputs, const int32_t* targets,
                       step_stats& stats, double& ce_sum);
  // Interleaved stages (interleaved_schedule.cpp): the same, with v model
  // chunks per stage and point-to-point sends around the stages.
  status interleaved_step(const int32_t* inputs, const int32_t* targets,
                          step_stats& stats, double& ce_sum);
  status interleaved_evaluate(const int32_t* inputs, const int32_t* targets,
                              int64_t seqs, double& ce_sum, int64_t& tokens,
                              step_timers& time);
  // Sends a copy of `count` floats at `data` to pipeline member `peer`
  // (kept in sent_ until the step's sends are received).
  status send_to_stage(int peer, uint32_t tag, const float* data,
                       int64_t count, step_timers& time);
  // Waits until the stage's sends were taken, then drops their copies.
  status finish_sends(step_timers& time);
  status pipeline_sums(step_stats& stats, double& ce_sum);
  status pipeline_evaluate(const int32_t* inputs, const int32_t* targets,
                           int64_t seqs, double& ce_sum, int64_t& tokens,
                           step_timers& time);
  // One exchange with a neighbouring stage over `link` (prev or next):
  // `send` and/or `recv` `count` floats (null: nothing that way).
  status link_exchange(comm::communicator* link, const float* send,
                       float* recv, int64_t count, step_timers& time);
  // Makes micro-batch i's activations (slot i % slots) the current ones.
  void use_slot(int64_t i);
  // train.keep_expert_activations where it changes anything: the expert
  // shard keeps a forward per slot, and nothing is run again.
  bool keeps_expert_activations() const {
    return cfg_.train.keep_expert_activations && slots_.size() > 1
           && cfg_.train.recompute != recompute_mode::full;
  }
  // Before backward: when the expert shard's saved forward of layer l is
  // another micro-batch's, runs the experts again on this one's rows.
  status restore_expert_forward(int64_t l, layer_acts& a, step_timers& time);

  // train.recompute: the activations a layer keeps only while it runs
  // live in work_ and move into acts_[l] for the layer's forward, and again
  // for its backward after recompute() rebuilt them (selective: the
  // attention probabilities; full: all but the layer's input).
  void swap_working(layer_acts& a);
  status recompute(int64_t l, int64_t seqs, step_timers& time);

  status attention_forward(int64_t l, int64_t seqs, step_timers& time);
  // The attention core on a layer's q, k, v: attn and attn_saved.
  void attention_core_forward(layer_acts& a, int64_t seqs);
  status attention_backward(int64_t l, int64_t seqs, tensor<float>& dx,
                            step_timers& time);
  status qk_norm_backward(int64_t l, int64_t n, step_timers& time);
  // Multi-head latent attention's forward and backward of layer l
  // (mla_block.cpp), in place of the grouped-query projections.
  mla::dims mla_dims(int64_t seqs) const;
  mla::weights<float> mla_weights(int64_t l);
  // The attention core's head size: head_dim, or MLA's qk_head_dim.
  int64_t core_head_dim() const;
  status mla_forward(int64_t l, int64_t seqs, step_timers& time);
  status mla_backward(int64_t l, int64_t seqs, tensor<float>& dx,
                      step_timers& time);
  // Tensor parallelism: sums a row-parallel layer's partial outputs (or a
  // column-parallel one's partial input gradients) over the TP group; does
  // nothing without one.
  status tp_sum(float* data, int64_t count, step_timers& time);
  // The embedding and the LM head, vocab-parallel under TP (each TP rank
  // holds rows [vocab_first_, vocab_first_ + vocab_rows_) of both;
  // vocab_parallel.cpp). `ids` and `targets`: the micro-batch's, on the
  // host.
  status embed_forward(const int32_t* ids, int64_t n, step_timers& time);
  void embed_backward(int64_t n);
  status head_loss(const int32_t* targets, int64_t n, double& ce_sum);
  status head_backward(int64_t n, step_timers& time);
  // Tokens of `ids` in this rank's vocabulary slice: their local ids into
  // vocab_ids_, their rows into vocab_at_ (both uploaded); the count.
  int64_t select_vocab_rows(const int32_t* ids, int64_t n);
  // The dense gradients' squared norm: per piece of the one-stage buffer
  // (plan_norm_pieces), summed over the ranks that hold them, then in
  // order (rank_model.cpp).
  void plan_norm_pieces();
  status dense_sum_squares(double& sum_squares, step_timers& time);
  status moe_forward(int64_t l, int64_t n, step_stats* stats,
                     step_timers& time);
  // The SwiGLU MLP of layer l on every token (mlp_block.cpp): a leading
  // dense layer's in place of router and experts, or the shared experts'
  // beside them. mlp_width: this TP rank's share of its width, 0 without
  // one. mlp_forward writes this TP rank's partial output of xn2 to `out`;
  // mlp_backward adds the partial gradient of xn2 for output gradient `dy`
  // to `dxn` and the weights' gradients to theirs.
  int64_t mlp_width(int64_t l) const;
  void mlp_forward(int64_t l, int64_t n, float* out);
  void mlp_backward(int64_t l, int64_t n, const float* dy, float* dxn);
  status dense_layer_forward(int64_t l, int64_t n, step_timers& time);
  status dense_layer_backward(int64_t l, int64_t n, tensor<float>& dx,
                              step_timers& time);
  status route_counts(layer_acts& a, int64_t n, step_stats& stats, int64_t l,
                      step_timers& time);
  status moe_backward(int64_t l, int64_t n, tensor<float>& dx,
                      step_timers& time);

  // The router losses' coefficients: each micro-batch's loss is its mean
  // over the micro-batch, and the step's is their mean.
  double aux_coeff() const;
  double z_coeff() const;

  float* param(const std::string& name);
  float* grad(const std::string& name);
  std::string layer_name(int64_t l, const char* suffix) const;

  job_config cfg_;
  comm_groups comms_;
  expert_executor& experts_;
  kernels::stream stream_;
  moe::staged_collectives collectives_;
  // This stage's tensors (stage_layout.hpp), this TP rank's slices of
  // them (tensor_parallel.hpp).
  model::param_layout layout_;
  struct norm_piece {
    int64_t local = -1; // offset in grads_; -1: another stage's
    int64_t count = 0;
    bool split = false; // a TP-split tensor's
    // Sharded under pipeline parallelism: the piece crosses where a stage's
    // optimizer slices are cut (not where the whole model's are), so its
    // summed values lie on two or more data-parallel ranks.
    bool straddles = false;
  };
  std::vector<norm_piece> norm_pieces_;
  int64_t heads_ = 0, kv_heads_ = 0; // attention heads this TP rank computes
  tensor<float> params_, grads_;
  adam_moments moments_; // AdamW's, of [opt_first_, + opt_count_)
  int64_t opt_first_ = 0, opt_count_ = 0;
  bool sharded_ = false; // train.optimizer_sharding over more than one rank
  tensor<float> router_bias_; // [layers, experts]; selection only
  // The placement on the device, [layers, experts] -> slot; empty when
  // contiguous (dispatch then groups rows by expert id, the same thing).
  tensor<int32_t> slot_of_expert_;
  std::vector<layer_acts> acts_;
  // Pipeline stage: stage_ of stages_, holding layers_ (one chunk, or
  // with interleaved stages several; chunk_ is the one computing). slots_
  // park the activations of the micro-batches in flight that are not
  // current (slot_ is the current one's, in acts_).
  int64_t stage_ = 0, stages_ = 1, chunk_ = 0;
  stage_layers layers_;
  std::vector<std::vector<float>> sent_; // interleaved sends in flight
  struct slot {
    std::vector<layer_acts> acts;
    tensor<int32_t> inputs, targets;
  };
  std::vector<slot> slots_;
  int64_t slot_ = 0;
  int64_t micro_ = 0; // the micro-batch being computed
  std::vector<int64_t> expert_forward_of_; // [layer] -> its micro-batch
  // Router losses of each [micro-batch][layer] (pipeline: summed over the
  // stages, then in the one-stage order), and counts over the step's
  // micro-batches [layer][expert], for bias balancing.
  std::vector<double> aux_terms_, z_terms_;
  std::vector<std::vector<int64_t>> counts_step_;
  std::vector<tensor<int64_t>> counts_step_dev_;
  layer_acts work_; // with recompute: one layer's worth, shared
  tensor<int32_t> inputs_, targets_;
  int64_t vocab_first_ = 0, vocab_rows_ = 0;
  tensor<int32_t> vocab_ids_;
  tensor<int64_t> vocab_at_;
  tensor<float> vocab_rows_buf_;
  tensor<float> x_final_, xnf_, rstdf_, logits_out_, lse_;
  // backward scratch; drows_ also holds the dispatch's packed rows
  tensor<float> dx_, dtmp_, dtmp2_, dq_, dk_, dv_, dattn_, dlogits_, drows_,
    dgate_, dexp_in_, dexp_out_;
  // The layer MLP's output, and its backward's scratch.
  tensor<float> mlp_out_, dmlp_h_, dmlp_gate_, dmlp_up_;
  // QK-norm's backward: q's and k's gradients before the norm, and the
  // norm weights' of one layer (q_norm then k_norm, summed over TP).
  tensor<float> dq_pre_, dk_pre_, dqk_norm_;
  // MLA's backward: working buffers, the core's output gradient unpacked,
  // and the replicated latents' weight gradients of one layer (summed over
  // TP before they join the layer's).
  mla::scratch<float> mla_tmp_;
  tensor<float> dattn_core_, dmla_latents_;
  std::vector<int32_t> topk_host_; // staging
  int64_t micro_seqs_ = 0;    // sequences per micro-batch on this rank
  int64_t global_tokens_ = 0; // of the current micro-batch, over all ranks
  // The MoE block's dispatch and combine over the EP group, the strategy
  // chosen once from the config (token_exchange.hpp); it also counts the
  // bytes this rank sends each EP member in a step.
  std::unique_ptr<moe::token_exchange> exchange_;
};

} // namespace tutti::train
