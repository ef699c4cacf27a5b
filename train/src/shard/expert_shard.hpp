#pragma once
// expert_shard: owns one rank's experts (weights, gradients, AdamW moments)
// of its pipeline stage's layers and runs them on the rows its rank
// dispatched. Spawned detached: its
// GEMMs block.
//
// Restart in place: the tensors live in an expert_shard_memory that the
// node supervisor keeps across restarts of the shard. Weights and moments
// are only written by the optimizer, and it writes the new values into a
// second set (AdamW out of place), which becomes the live one when the
// update is complete: the live set is always the state at the start of the
// current step, at no cost per step beyond the memory of the second set. A
// restarted shard starts from it, and its rank replays the step's expert
// work (shard_executor), so the step's result is the same bits. A job
// whose shards may not restart (job_config::expert_restart_in_place) keeps
// no second set and updates in place.

#include <memory>
#include <vector>

#include "tutti/train/adam_moments.hpp"
#include "tutti/protocol/interfaces.hpp"
#include "tutti/kernels/tensor.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti {

// On the shard's device (the rank's GPU, or host memory on a CPU).
struct expert_shard_memory {
  using tensor = kernels::tensor<float>;
  tensor params, grads;   // live: the state at the step's start
  train::adam_moments moments;
  tensor next_params;     // where the optimizer writes, if restarts are
  train::adam_moments next_moments; // in place
  int64_t optimized_step = 0;         // last step whose update is live
  bool initialized = false;
  // Which experts the blocks hold, [layer][row]: fixed when the memory is
  // first initialised, so a restarted shard keeps them.
  std::vector<int32_t> expert_ids;
};

struct expert_shard_args {
  job_config cfg;
  int32_t rank = 0; // global rank; its EP rank picks the experts
  // The experts it holds, [layer][row] (placement_plan::experts_of_rank of
  // its EP rank); empty: the contiguous block of its EP rank.
  std::vector<int32_t> expert_ids;
  std::shared_ptr<expert_shard_memory> memory;
  int device = -1; // CUDA device ordinal (its rank's); -1: the CPU
  // On the CPU: its rank's place among the ranks of the process, for the
  // core they share (base/core_pinning.hpp); -1: not pinned.
  int local_rank = -1;
  int ranks_in_process = 0;
};

expert_shard_actor spawn_expert_shard(caf::actor_system& sys,
                                      expert_shard_args args);

} // namespace tutti
