#pragma once
// expert_shard: owns one rank's experts (weights, gradients, AdamW moments)
// and runs them on the rows its rank dispatched. Spawned detached: its
// GEMMs block.
//
// Restart in place: the tensors live in an expert_shard_memory that the
// node supervisor keeps across restarts of the shard. It holds a copy of
// weights and moments as of the start of the current step; a restarted
// shard starts from that copy, and its rank replays the step's expert work
// (shard_executor), so the step's result is the same bits.

#include <memory>

#include "tutti/actors/interfaces.hpp"
#include "tutti/kernels/tensor.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti {

// On the shard's device (the rank's GPU, or host memory on a CPU).
struct expert_shard_memory {
  using tensor = kernels::tensor<float>;
  tensor params, grads, m, v;            // live
  tensor start_params, start_m, start_v; // at the step's start
  int64_t optimized_step = 0; // last step whose update both copies hold
  bool initialized = false;
};

struct expert_shard_args {
  job_config cfg;
  int32_t rank = 0; // global rank; its EP rank picks the experts
  std::shared_ptr<expert_shard_memory> memory;
  int device = -1; // CUDA device ordinal (its rank's); -1: the CPU
};

expert_shard_actor spawn_expert_shard(caf::actor_system& sys,
                                      expert_shard_args args);

} // namespace tutti
