#pragma once
// node_supervisor: the root of one node's actor tree. Spawns, per local
// rank, its data loader, its expert shard and the rank itself; monitors all
// of them; a child that fails is escalated to the coordinator. (Restart
// strategies come with the supervision issue.)

#include "tutti/actors/interfaces.hpp"
#include "tutti/protocol/job_config.hpp"

namespace tutti {

using node_supervisor_actor = caf::typed_actor<caf::reacts_to<stop_atom>>;

struct node_supervisor_args {
  job_config cfg;
  int64_t node_rank = 0;
  coordinator_actor coordinator;
};

node_supervisor_actor spawn_node_supervisor(caf::actor_system& sys,
                                            node_supervisor_args args);

} // namespace tutti
