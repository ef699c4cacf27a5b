#pragma once
// The SwiGLU experts of one shard: y = w2 (silu(w1 x) * (w3 x)), each expert
// on its own contiguous block of rows (the grouped GEMM of the MoE block).
// Keeps what backward needs, per layer, between forward and backward.

#include <cstdint>
#include <functional>
#include <vector>

#include "tutti/config/job_config.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/kernels/tensor.hpp"
#include "tutti/model/param_layout.hpp"

namespace tutti::train {

// Views into the shard's flat buffers for one layer.
struct expert_block {
  const float* w1; // [experts, F, D]
  const float* w3; // [experts, F, D]
  const float* w2; // [experts, D, F]
  float* dw1;
  float* dw3;
  float* dw2;
};

class expert_ffn {
public:
  expert_ffn(int64_t layers, int64_t experts, int64_t hidden,
             int64_t intermediate);

  // On the CPU the work may be cut into tiles: rows of an expert (forward,
  // and the input gradients) and rows of its weight gradients, so that the
  // ranks of a node can share them. Their bounds depend only on how many
  // rows each expert received, never on who runs them, because OpenBLAS's
  // bits depend on the shapes it is called with; so tiled or not is the
  // config's choice (a node with several ranks), the same for every run of
  // it. A tile costs a packing of the other operand: a world-1 step ran 6%
  // slower with tiles of 128 rows, hence whole experts where nobody can
  // share and tiles of 256 (the wait they leave stays under 3% of a world-2
  // step of the medium model, bench_vs_torch).
  static constexpr int64_t row_tile = 256;
  static constexpr int64_t weight_tile = 256;
  void split_into_tiles(bool on) { tiles_ = on; }
  // With tiles, run them through the process's idle_core_pool, so that a
  // rank waiting in an exchange computes some of them (the same bits).
  void share_idle_cores(bool on) { share_cores_ = on; }
  // Which micro-batch in flight the next forward and backward are for:
  // each slot keeps its own saved forward of every layer.
  void use_slot(int64_t slot);

  // rows[j] (host memory) rows of x belong to local expert j, in order. y
  // is [sum rows, D]. x, y and the weights are in s's device memory.
  // `append`: the rows follow the last forward's of this layer (a later
  // chunk, experts in increasing order); backward then covers all of them.
  void forward(const kernels::stream& s, int64_t layer, const expert_block& w,
               const float* x, const int64_t* rows, float* y,
               bool append = false);

  // Gradients of the last forward(s) of `layer`: dx overwritten, weight
  // gradients accumulated. rows == nullptr: every saved row; else rows[j]
  // of expert j from saved row `first_row` on (one chunk).
  void backward(const kernels::stream& s, int64_t layer, const expert_block& w,
                const float* dy, float* dx, const int64_t* rows = nullptr,
                int64_t first_row = 0);

private:
  // Runs the tiles: through the pool when sharing, else one by one.
  void run_tiles(const std::vector<std::function<void()>>& tiles) const;

  struct saved {
    std::vector<int64_t> rows;
    kernels::tensor<float> x, a, b, h;
  };
  int64_t layers_, experts_, hidden_, intermediate_;
  bool tiles_ = false, share_cores_ = false;
  std::vector<std::vector<saved>> saved_; // [slot][layer]
  size_t slot_ = 0;
  kernels::tensor<float> dh_, da_, db_, dx_tmp_;
};

// A job's choice for its expert shards on `device` (-1: the CPU): tiles
// where a node has several CPU ranks, and shared with the node's waiting
// ranks when moe_config.share_idle_cores says so.
bool expert_tiles_for(const job_config& cfg, int device);
bool shares_expert_tiles(const job_config& cfg, int device);

} // namespace tutti::train
