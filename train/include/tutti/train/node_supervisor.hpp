#pragma once
// node_supervisor: the root of one node's actor tree. Registers its node
// with the coordinator and sends it heartbeats. When the coordinator starts
// an epoch of the job it spawns, under OTP supervisors configured by
// `supervision:`, per local rank a data loader and an expert shard, one
// checkpoint writer for the node, and the ranks themselves:
//
//   node_supervisor
//   ├── checkpoint_writers   (checkpoint_writer)           lives across epochs
//   ├── data_loaders/E       (data_loader/R per rank)      one per epoch
//   ├── expert_shards/E      (expert_shard/R per rank)     one per epoch
//   └── rank R               (monitored; a failure goes to the coordinator)
//
// Restarts happen in place; a supervisor that gives up escalates here and
// on to the coordinator, which recovers the job. abort_atom ends the
// epoch's ranks at once (their communicators are aborted). On stop_atom its
// ranks end the job at the next step boundary. Faults are injected here
// (chaos_atom).

#include <memory>

#include "tutti/protocol/interfaces.hpp"
#include "tutti/runtime/metrics_board.hpp"
#include "tutti/comm/memory_communicator.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti {

struct node_supervisor_args {
  job_config cfg;
  int64_t node_rank = 0;
  coordinator_actor coordinator;
  std::string rack; // overrides the config's rack label when set
  std::shared_ptr<metrics_board> board; // this node's /metrics; may be null
  // The ranks of this process (every node's in `tutti run`, this node's
  // under tuttid): groups entirely among them exchange through memory
  // (cluster_config.local_transport). Null: always Gloo.
  std::shared_ptr<comm::memory_hub> memory_hub;
  // What this node runs with, as "component=value" lines (lifecycle/environment),
  // gathered before the actor starts (it reads every data file).
  std::vector<std::string> environment;
};

node_supervisor_actor spawn_node_supervisor(caf::actor_system& sys,
                                            node_supervisor_args args);

} // namespace tutti
