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
#include <vector>

#include "tutti/actors/interfaces.hpp"
#include "tutti/protocol/job_config.hpp"

namespace tutti {

struct expert_shard_memory {
  std::vector<float> params, grads, m, v;          // live
  std::vector<float> start_params, start_m, start_v; // at the step's start
  int64_t optimized_step = 0; // last step whose update both copies hold
  bool initialized = false;
};

struct expert_shard_args {
  job_config cfg;
  int32_t rank = 0; // global rank; its EP rank picks the experts
  std::shared_ptr<expert_shard_memory> memory;
};

expert_shard_actor spawn_expert_shard(caf::actor_system& sys,
                                      expert_shard_args args);

} // namespace tutti
