#pragma once
// What memory_plan.cpp and layout_search.cpp share: the shapes one rank
// of a layout works on, the layers' parameter sums, and one pipeline
// stage's memory as a function of its layers.

#include <algorithm>
#include <cmath>
#include <vector>

#include "tutti/train/memory_plan.hpp"

namespace tutti::train {

constexpr double fp32 = 4.0;

// The shapes one rank of a layout works on, in elements.
struct shapes {
  double d, f, v, hq, hkv, hd, E, K, s;
  double n;    // tokens of one micro-batch on one data-parallel rank
  double seqs; // its sequences
  double recv; // rows this rank's experts receive per layer (balanced)
};

inline shapes shapes_of(const job_config& cfg, const parallel_layout& l) {
  const auto& m = cfg.model;
  const auto& e = cfg.moe;
  shapes x{};
  x.d = m.hidden_size;
  // TP as built: heads (query and KV; T divides both), the experts'
  // intermediate dimension and the embedding's and LM head's vocabulary
  // split.
  x.f = static_cast<double>(m.intermediate_size) / l.tp;
  x.v = static_cast<double>(m.vocab_size) / l.tp;
  x.hq = static_cast<double>(m.num_attention_heads) / l.tp;
  x.hkv = static_cast<double>(m.num_key_value_heads) / l.tp;
  x.hd = head_dim_of(cfg);
  x.E = e.num_experts;
  x.K = e.router_top_k;
  x.s = cfg.train.seq_len;
  x.seqs = static_cast<double>(cfg.train.global_batch_size) / l.dp
           / l.micro_batches;
  x.n = x.seqs * x.s;
  x.recv = x.n * x.K;
  if (e.capacity_factor > 0)
    x.recv = std::min(x.recv, std::ceil(e.capacity_factor * x.n * x.K / x.E)
                                * x.E);
  return x;
}

// Dispatch receive rows (capacity_plan's dispatch_buffer_rows) for a layout.
inline double dispatch_rows(const job_config& cfg, const parallel_layout& l,
                            const shapes& x) {
  const auto& e = cfg.moe;
  const double local = x.E / l.ep;
  if (e.capacity_factor > 0)
    return local * std::ceil(e.capacity_factor * x.n * x.K / x.E) * l.ep;
  return l.ep * x.n * std::min(x.K, local);
}

// Layers per stage of `l`: its list, or equal shares (the later stages
// one more where they do not divide).
std::vector<int64_t> stage_counts(const job_config& cfg,
                                  const parallel_layout& l);

// Prefix sums of params_of_layer over the layers, for one (tp, ep).
struct layer_sums {
  std::vector<double> dense, experts;
  layer_sums(const job_config& cfg, int64_t tp, int64_t ep);
  double dense_in(int64_t first, int64_t last) const {
    return dense[last] - dense[first];
  }
  double experts_in(int64_t first, int64_t last) const {
    return experts[last] - experts[first];
  }
};

// Bytes of one rank of a stage, by component.
struct stage_memory {
  double weights = 0, gradients = 0, master = 0, optimizer = 0, scratch = 0;
  double in_flight = 1, micro = 0, activations = 0, working = 0;
  double dispatch = 0, total = 0;
};

// One rank's memory in any stage of a layout, given the stage's layers and
// their parameters: linear in them, which balanced_stage_layers uses.
class stage_model {
public:
  // `rows_share`: the rows this rank's experts receive over the balanced
  // share (dropless routing only; capacity bounds them).
  stage_model(const job_config& cfg, const parallel_layout& l,
              double rows_share = 1.0);
  stage_memory at(int64_t stage, double layers, double dense,
                  double experts) const;
  const shapes& shapes_in_use() const { return x_; }
  bool tiled() const { return tiled_; }
  double probs() const { return probs_; }
  double act_bytes() const { return act_; }

private:
  parallel_layout l_;
  shapes x_;
  double params_ = 4, grads_ = 4, master_ = 0, moments_ = 8, act_ = 4;
  bool restart_ = false, tiled_ = false;
  bool keep_experts_ = false; // train.keep_expert_activations, in effect
  double probs_ = 0, per_layer_ = 0, shared_ = 0, scratch_ = 0;
  double dispatch_ = 0;
};

} // namespace tutti::train
