#pragma once
// Messages that never leave their process: they carry pointers to buffers
// owned by the sender, valid until the receiver replies.

#include <caf/allowed_unsafe_message_type.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <memory>
#include <vector>

namespace tutti {

// One call into an expert shard: forward (x -> y) or backward (dy -> dx)
// of one layer's local experts on rows in expert-major order.
struct expert_task {
  int64_t layer = 0;
  const float* input = nullptr;
  float* output = nullptr;
  // Forward: rows of each local expert. Backward: null for all of the
  // forward's rows, else one chunk's, from the forward's row `first_row`.
  const int64_t* rows_per_expert = nullptr;
  int64_t rows = 0;
  bool append = false;   // forward: a later chunk of the same layer
  bool last_chunk = true; // the layer's last (or only) chunk
  int64_t first_row = 0; // backward of a chunk
  // Which of the micro-batches in flight (pipeline parallelism): the
  // shard keeps each one's saved forward for its backward.
  int64_t slot = 0;
  double seconds = 0;    // out: the shard's time on it (set before replying)
};
using expert_task_ptr = std::shared_ptr<expert_task>;

// The shard's gradient buffer, lent to its rank for the collective.
struct grad_view {
  float* data = nullptr;
  int64_t size = 0;
};

// AdamW arguments for the shard's experts.
struct optimizer_args {
  int64_t step = 0;
  double lr = 0;
  double grad_scale = 1;
};

// A tensor copied out of its owner at a step boundary.
struct owned_tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// One rank's state at a step boundary, in host memory: what its shard file
// of a checkpoint holds. Training goes on while the checkpoint writer
// persists it.
struct rank_snapshot {
  int64_t step = 0;
  int64_t rank = 0;
  int64_t epoch = 0;
  std::vector<owned_tensor> tensors;
  std::map<std::string, int64_t> ints;
  std::map<std::string, std::string> strings;
  // The expert shard's tensors, shared with the shard's answer rather than
  // copied: a copy would hold the experts' weights and moments twice while
  // the checkpoint is taken. Written after `tensors`.
  std::shared_ptr<const rank_snapshot> experts;

  template <class F>
  void for_each_tensor(F&& f) const {
    for (const auto& t : tensors)
      f(t);
    if (experts)
      experts->for_each_tensor(f);
  }
};
using rank_snapshot_ptr = std::shared_ptr<const rank_snapshot>;

// A batch from a data loader: [seqs, seq_len] inputs and targets.
struct token_batch {
  int64_t step = 0;
  int64_t seqs = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};
using token_batch_ptr = std::shared_ptr<const token_batch>;

} // namespace tutti

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tutti::expert_task_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tutti::grad_view)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tutti::optimizer_args)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tutti::token_batch_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tutti::rank_snapshot_ptr)
