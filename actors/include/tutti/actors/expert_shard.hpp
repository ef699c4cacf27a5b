#pragma once
// expert_shard: owns one rank's experts (weights, gradients, AdamW moments)
// and runs them on the rows its rank dispatched. Spawned detached: its
// GEMMs block.

#include "tutti/actors/interfaces.hpp"
#include "tutti/protocol/job_config.hpp"

namespace tutti {

struct expert_shard_args {
  job_config cfg;
  int32_t rank = 0; // global rank; its EP rank picks the experts
};

expert_shard_actor spawn_expert_shard(caf::actor_system& sys,
                                      expert_shard_args args);

} // namespace tutti
