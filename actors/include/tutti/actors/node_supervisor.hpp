#pragma once
// node_supervisor: the root of one node's actor tree. Registers its node
// with the coordinator; when the coordinator starts the job, spawns, per
// local rank, its data loader, its expert shard and the rank itself, and
// monitors all of them; a child that fails is escalated to the coordinator.
// On stop_atom its ranks end the job at the next step boundary. (Restart
// strategies come with the supervision issue.)

#include "tutti/actors/interfaces.hpp"
#include "tutti/protocol/job_config.hpp"

namespace tutti {

struct node_supervisor_args {
  job_config cfg;
  int64_t node_rank = 0;
  coordinator_actor coordinator;
  std::string rack; // overrides the config's rack label when set
};

node_supervisor_actor spawn_node_supervisor(caf::actor_system& sys,
                                            node_supervisor_args args);

} // namespace tutti
