#pragma once
// The node supervisor's state, shared by node_supervisor.cpp (registration,
// epochs, heartbeats, failures) and node_operations.cpp (what the shell
// and chaos ask of a node).

#include <caf/stateful_actor.hpp>

#include <chrono>
#include <map>
#include <memory>

#include "checkpoint/checkpoint_writer.hpp"
#include "node/replica_store.hpp"
#include "tutti/runtime/metrics_board.hpp"
#include "tutti/train/node_supervisor.hpp"
#include "rank/rank_actor.hpp"
#include "tutti/runtime/supervisor.hpp"

namespace tutti {

using clock_type = std::chrono::steady_clock;

struct running_rank {
  int32_t rank = 0;
  int64_t epoch = 0;
  caf::actor handle;
  std::shared_ptr<rank_control> control;
};

struct node_supervisor_state {
  node_supervisor_state() = default; // not an aggregate (CAF would pass `this`)
  static inline const char* name = "node_supervisor";
  node_supervisor_args args;
  int64_t epoch = -1; // the epoch whose ranks run here; -1: none yet
  // This node's index in that epoch's layout (-1: the epoch trains
  // without this node), and where its ranks meet in memory.
  int64_t epoch_index = -1;
  std::shared_ptr<comm::memory_hub> hub;
  // Copies of ranks' state in memory, this node's and a peer's; null when
  // elastic.replica_interval_steps is off.
  std::shared_ptr<replica_store> replicas;
  bool registered = false;
  bool job_over = false; // our ranks finished the job
  supervisor_actor writers, loaders, experts;
  caf::actor writer; // monitored while the job drains
  std::shared_ptr<checkpoint_in_flight> in_flight =
    std::make_shared<checkpoint_in_flight>();
  std::map<caf::actor_addr, running_rank> ranks;    // of the current epoch
  std::map<caf::actor_addr, running_rank> aborting; // of older epochs
  int64_t abort_epoch = -1;                         // to report when done
  clock_type::time_point abort_deadline;
  clock_type::time_point last_heartbeat = clock_type::now();

  std::shared_ptr<metrics_board> board; // this node's /metrics; may be null
  std::map<std::string, int64_t> restarts_by_kind;
  bool draining = false;

  std::string who() const { return "node " + std::to_string(args.node_rank); }
  int32_t first_rank() const {
    return static_cast<int32_t>(epoch_index * args.cfg.cluster.nproc_per_node);
  }
};

using node_pointer =
  node_supervisor_actor::stateful_pointer<node_supervisor_state>;

// node_operations.cpp
std::string inject(node_pointer self, const chaos_request& req);
caf::result<std::vector<actor_info>> list_actors(node_pointer self);
void request_from_ranks(node_pointer self, const std::string& what);
caf::result<std::string> exit_actor(node_pointer self, const std::string& path,
                                    bool kill);
void publish_node_metrics(node_pointer self);

} // namespace tutti
