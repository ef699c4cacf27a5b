#pragma once
// rank: drives one device through the step loop. A blocking actor spawned
// detached: it waits in kernels, in collectives and on its expert shard and
// data loader, on its own thread.

#include <caf/actor.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_writer.hpp"
#include "shard/expert_shard.hpp"
#include "tutti/protocol/interfaces.hpp"
#include "tutti/train/rank.hpp"
#include "tutti/runtime/supervisor.hpp"
#include "tutti/comm/communicator.hpp"
#include "tutti/comm/memory_communicator.hpp"

namespace tutti {

// What the node supervisor can do to a rank from outside its thread, which
// may be blocked in a collective: abort it (recovery), or inject a fault.
class rank_control {
public:
  // Aborts the rank's communicators (every collective in flight fails at
  // once, here and on its peers) and tells the step loop to end quietly.
  void abort();
  bool aborted() const { return aborted_.load(); }

  // The rank registers each communicator it builds; one built after
  // abort() is aborted at once.
  void add(comm::communicator* c);
  void clear();

  // Faults: crash (an exception) at the next step; hang there until
  // aborted; sleep per step.
  std::atomic<bool> crash{false};
  std::atomic<bool> hang{false};
  std::atomic<double> slow_s{0};

  // Operator requests (the shell): the ranks agree on the step through its
  // all-reduce, then pause after it (until resume) or checkpoint it.
  std::atomic<bool> pause_requested{false};
  std::atomic<bool> resume{false};
  std::atomic<bool> checkpoint_requested{false};
  std::atomic<bool> paused{false}; // for the shell's actors listing

private:
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::vector<comm::communicator*> comms_;
};

class replica_store;

struct rank_args {
  job_config cfg;
  int32_t rank = 0;  // global
  int64_t epoch = 0; // membership epoch: names the rendezvous groups
  coordinator_actor coordinator;
  // Where the rank finds its helpers: by child id ("data_loader/3", ...)
  // in their supervisors, again after a restart.
  supervisor_actor loaders, experts, writers;
  std::shared_ptr<rank_control> control;
  int64_t resume_step = 0; // 0 = from scratch; else load that checkpoint
  // Shared with the expert shard (its gradients are lent to the rank for
  // the all-reduce) and with the node's checkpoint writer (writes queue
  // there first): the rank keeps both alive while it may touch them.
  std::shared_ptr<expert_shard_memory> shard_memory;
  std::shared_ptr<checkpoint_in_flight> checkpoint_writes;
  // The process's in-memory rendezvous (node_supervisor_args); may be null.
  std::shared_ptr<comm::memory_hub> memory_hub;
  // The placement (placement::plan_for, read by the node once per epoch):
  // the experts this rank's shard holds, [layer][row], and every expert's
  // slot in the EP group, [layer][expert], for dispatch (empty: the
  // contiguous layout). placement_error: why the plan could not be read;
  // the rank then fails with it.
  std::vector<int32_t> expert_ids, slot_of_expert;
  std::string placement_error;
  // The node's in-memory copies of ranks' state (node/replica_store.hpp),
  // kept across epochs; null: elastic.replica_interval_steps is off.
  std::shared_ptr<replica_store> replicas;
};

caf::actor spawn_rank(caf::actor_system& sys, rank_args args);

} // namespace tutti
