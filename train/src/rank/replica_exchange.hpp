#pragma once
// A rank's copy of its state to a rank of another node, and that node's
// copy to it (elastic.replica_interval_steps; the pairs from
// elastic/replica_peers.hpp). Both copies go into the node's
// replica_store, which outlives the rank.

#include <atomic>
#include <thread>

#include "tutti/comm/communicator.hpp"
#include "rank/rank_actor.hpp"

namespace tutti {

// Sends `snap` (this rank's state after snap->step) to its peer and takes
// the peer's, over `link`. `bytes_sent`: out.
status exchange_replicas(const rank_args& a, comm::communicator& link,
                         rank_snapshot_ptr snap, int64_t& bytes_sent);

// Runs each exchange on its own thread over the replica communicator, so
// the next step trains while the copy travels; one copy in flight at a
// time (the next one waits for it: its snapshot's memory is counted by
// the plan as three steps of copies at the peak).
class replica_copier {
public:
  // `durable_step`: what a recovery could resume from before any copy
  // (the checkpoint this epoch resumed from).
  replica_copier(const rank_args& a, int64_t durable_step)
    : a_(a), done_step_(durable_step) {}
  replica_copier(const replica_copier&) = delete;
  replica_copier& operator=(const replica_copier&) = delete;
  // A copy still in flight (the rank failed mid-step) is aborted.
  ~replica_copier();

  // Starts copying `snap` over `link`; waits for the copy in flight first,
  // and returns its error, if it failed.
  status start(comm::communicator& link, rank_snapshot_ptr snap);
  // Waits for the copy in flight; its error, if it failed.
  status wait();
  // Takes note of a copy that has finished, without waiting.
  status poll();

  bool in_flight() const { return thread_.joinable(); }
  // The newest step whose copy (both ways) has finished.
  int64_t done_step() const { return done_step_; }
  // Bytes this rank sent for that copy.
  int64_t bytes_sent() const { return done_bytes_; }

private:
  status join();

  const rank_args& a_;
  std::thread thread_;
  comm::communicator* link_ = nullptr;
  std::atomic<bool> finished_{false};
  status result_;
  int64_t in_flight_step_ = 0, in_flight_bytes_ = 0;
  int64_t done_step_ = 0, done_bytes_ = 0;
};

} // namespace tutti
