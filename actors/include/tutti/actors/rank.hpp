#pragma once
// rank: drives one device through the step loop. A blocking actor spawned
// detached: it waits in kernels, in collectives and on its expert shard and
// data loader, on its own thread.

#include <caf/actor.hpp>

#include "tutti/actors/interfaces.hpp"
#include "tutti/protocol/job_config.hpp"

namespace tutti {

struct rank_args {
  job_config cfg;
  int32_t rank = 0; // global
  coordinator_actor coordinator;
  data_loader_actor loader;
  expert_shard_actor shard;
  checkpoint_writer_actor writer;
  int64_t resume_step = 0; // 0 = from scratch; else load that checkpoint
};

caf::actor spawn_rank(caf::actor_system& sys, rank_args args);

} // namespace tutti
