#pragma once
// How a rank's MoE block reaches the experts it dispatched tokens to. In
// tutti the rank's expert shard actor implements it (train/src/shard/); tests and
// benchmarks can run an expert_ffn directly.

#include <cstdint>
#include <functional>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti::train {

class expert_executor {
public:
  virtual ~expert_executor() = default;

  // The micro-batch in flight the next calls are for (pipeline
  // parallelism keeps several): the experts keep each slot's last forward
  // of each layer for its backward.
  void use_slot(int64_t slot) { slot_ = slot; }
  int64_t slot() const { return slot_; }

  // x: m rows in expert-major order, rows[j] for local expert j; y: [m, D].
  // `append`: these rows follow the previous forward's of the same layer
  // (a later chunk; experts in increasing order), and backward covers both.
  virtual status forward(int64_t layer, const float* x, const int64_t* rows,
                         int64_t m, float* y, bool append) = 0;

  // Gradient of the last forward(s) of `layer`: dy [m, D] -> dx [m, D].
  // rows == nullptr: all of the forward's rows; else rows[j] of local
  // expert j, from row `first_row` of the forward's (one chunk).
  virtual status backward(int64_t layer, const float* dy, int64_t m, float* dx,
                          const int64_t* rows, int64_t first_row) = 0;

  // The experts on consecutive chunks of x: chunk c holds rows[c][j] rows
  // of local expert j, after chunk c-1's, and its outputs go to the same
  // rows of y. `ready(c)` runs on the calling thread once chunk c is in y.
  // This one runs the chunks one after another; an executor with its own
  // thread computes chunk c+1 while ready(c) runs, and adds that time to
  // `overlapped_s`.
  virtual status forward_chunks(int64_t layer, const float* x, float* y,
                                int64_t hidden,
                                const std::vector<std::vector<int64_t>>& rows,
                                const std::function<status(size_t)>& ready,
                                double& overlapped_s);

  // The same for the backward pass: dy -> dx, in the forward's chunks.
  virtual status backward_chunks(int64_t layer, const float* dy, float* dx,
                                 int64_t hidden,
                                 const std::vector<std::vector<int64_t>>& rows,
                                 const std::function<status(size_t)>& ready,
                                 double& overlapped_s);

private:
  int64_t slot_ = 0;
};

// How many chunks a layer's combine goes in: moe_config.combine_chunks, at
// most one per local expert, and one where a rank is alone in its EP group
// (it sends nothing, so there is nothing to overlap).
int64_t combine_chunk_count(const job_config& cfg);

// Row offsets of consecutive chunks: start[c] .. start[c + 1].
std::vector<int64_t> chunk_starts(
  const std::vector<std::vector<int64_t>>& rows);

} // namespace tutti::train
