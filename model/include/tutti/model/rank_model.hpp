#pragma once
// One rank's share of the Mixtral model: the replicated dense weights with
// their gradients and AdamW state, the activations of the current step, and
// the MoE plumbing (route, dispatch over the EP group, experts through an
// expert_executor, combine). Blocking: runs on the rank's own thread.
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
#include "tutti/model/expert_executor.hpp"
#include "tutti/model/param_layout.hpp"
#include "tutti/model/rack_exchange.hpp"
#include "tutti/model/staged_collectives.hpp"
#include "tutti/model/step_stats.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti::model {

// The communicators one rank takes part in. ep may equal world;
// expert_dp (ranks holding the same experts) is null when it has one member.
struct comm_groups {
  comm::communicator* world = nullptr;
  comm::communicator* ep = nullptr;
  comm::communicator* expert_dp = nullptr;
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

  // Sums dense gradients over world (all-reduce; with
  // train.optimizer_sharding a reduce-scatter: only this rank's optimizer
  // slice is summed); returns their global squared norm, summed slice by
  // slice in member order either way, so both give the same bits.
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

  const param_layout& layout() const { return layout_; }
  const kernels::stream& stream() const { return stream_; }
  // On the model's device; checkpoints copy them with to_host / upload.
  kernels::tensor<float>& params() { return params_; }
  kernels::tensor<float>& grads() { return grads_; }
  kernels::tensor<float>& router_bias() { return router_bias_; }

private:
  template <class T>
  using tensor = kernels::tensor<T>;

  struct layer_acts {
    tensor<float> x_in, xn1, rstd1, q, k, v, probs, attn, x_mid, xn2, rstd2,
      logits, rprobs, gate, y_rows, fraction;
    tensor<int32_t> topk_orig, topk_kept, slot_of_row;
    tensor<int64_t> kept, src_index, counts_global_dev;
    // Host side of the dispatch plan.
    std::vector<int64_t> kept_host, send_counts, recv_counts,
      recv_expert_counts, rows_per_expert, counts_global;
    std::vector<int64_t> counts_step; // counts_global over the micro-batches
    int64_t rows = 0, recv_rows = 0;
  };

  status forward(const int32_t* inputs, const int32_t* targets, int64_t seqs,
                 double& ce_sum, step_stats* stats, step_timers& time);
  status backward(int64_t seqs, step_timers& time);

  // train.recompute: the activations a layer keeps only while it runs
  // live in work_ and move into acts_[l] for the layer's forward, and again
  // for its backward after recompute() rebuilt them (selective: the
  // attention probabilities; full: all but the layer's input).
  void swap_working(layer_acts& a);
  status recompute(int64_t l, int64_t seqs, step_timers& time);

  status attention_forward(int64_t l, int64_t seqs);
  void attention_backward(int64_t l, int64_t seqs, tensor<float>& dx);
  status moe_forward(int64_t l, int64_t n, step_stats* stats,
                     step_timers& time);
  status route_counts(layer_acts& a, int64_t n, step_stats& stats, int64_t l,
                      step_timers& time);
  status moe_backward(int64_t l, int64_t n, tensor<float>& dx,
                      step_timers& time);
  // The combine in chunks of local experts (moe_combine.cpp): chunk c of
  // `expert_major` rows (the experts' outputs, or their input gradients)
  // back to the ranks they came from, into `dispatch_order`.
  void plan_combine(const layer_acts& a);
  std::vector<std::vector<int64_t>> combine_chunk_rows() const;
  status combine_chunk(const layer_acts& a, size_t c,
                       const tensor<float>& expert_major,
                       tensor<float>& dispatch_order, step_timers& time);

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
  staged_collectives collectives_;
  param_layout layout_;
  tensor<float> params_, grads_;
  tensor<float> m_, v_; // AdamW moments of [opt_first_, + opt_count_)
  int64_t opt_first_ = 0, opt_count_ = 0;
  bool sharded_ = false; // train.optimizer_sharding over more than one rank
  tensor<float> router_bias_; // [layers, experts]; selection only
  // The placement on the device, [layers, experts] -> slot; empty when
  // contiguous (dispatch then groups rows by expert id, the same thing).
  tensor<int32_t> slot_of_expert_;
  std::vector<layer_acts> acts_;
  layer_acts work_; // with recompute: one layer's worth, shared
  tensor<int32_t> inputs_, targets_;
  tensor<float> x_final_, xnf_, rstdf_, logits_out_, lse_;
  // backward scratch
  tensor<float> dx_, dtmp_, dtmp2_, dq_, dk_, dv_, dattn_, dlogits_, drows_,
    drecv_, dgate_, dexp_in_, dexp_out_;
  std::vector<int32_t> topk_host_; // staging
  // This layer's combine chunks: local experts [first, last), their rows
  // in expert-major order, and the rows to and from each EP member.
  struct combine_plan {
    int64_t first = 0, last = 0, start = 0, rows = 0;
    std::vector<int64_t> send, recv;
    std::vector<int64_t> rows_per_expert; // for the executor
  };
  std::vector<combine_plan> combine_;
  std::vector<int64_t> expert_start_; // dispatch-order row of each expert
  tensor<float> dsend_, dcombine_;
  tensor<int64_t> combine_index_;
  int64_t micro_seqs_ = 0;    // sequences per micro-batch on this rank
  int64_t global_tokens_ = 0; // of the current micro-batch, over all ranks
  int64_t alltoall_bytes_ = 0; // payload this rank sent this step
  std::vector<int64_t> alltoall_bytes_to_; // of it, to each EP member
  void count_sent_rows(const std::vector<int64_t>& rows_to);
  void count_sent_bytes(const std::vector<int64_t>& bytes_to);

  // The exchanges of the MoE block (moe_exchange.cpp), flat or through the
  // rack relays (moe_config.rack_aware_alltoall): same bits either way.
  // The dispatch of layer l's rows (xn2 by slot_of_row) into drecv_.
  status dispatch_rows(layer_acts& a, step_timers& time);
  // Rows of hidden-size floats by EP member; `dir` says which end is the
  // tokens' home (the dispatch leaves it, the combine returns to it).
  status exchange_rows(relay_direction dir, const float* send,
                       const std::vector<int64_t>& send_rows, float* recv,
                       const std::vector<int64_t>& recv_rows,
                       step_timers& time);
  std::unique_ptr<rack_exchange> rack_; // null: flat all-to-all
  std::vector<int32_t> slot_host_;      // staging
};

} // namespace tutti::model
