#pragma once
// A rank's copy of its state to a rank of another node, and that node's
// copy to it (elastic.replica_interval_steps; the pairs from
// elastic/replica_peers.hpp). Both copies go into the node's
// replica_store, which outlives the rank.

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tutti/comm/communicator.hpp"
#include "rank/rank_actor.hpp"

namespace tutti {

// The two links of a rank's copies: `out` to the rank that keeps this
// rank's copy (this rank is its member 0), `in` from the rank whose copy
// this rank keeps (this rank is its member 1).
struct replica_links {
  comm::communicator* out = nullptr;
  comm::communicator* in = nullptr;
};

// Sends `snap` (this rank's state after snap->step) over links.out and
// takes the peer's over links.in. `bytes_sent`: out.
status exchange_replicas(const rank_args& a, const replica_links& links,
                         rank_snapshot_ptr snap, int64_t& bytes_sent);

// Runs each exchange on a thread of its own, so the next step trains while
// the copy travels; one copy in flight at a time (the next waits for it:
// the plan counts four steps of copies at the peak). A step whose copy
// was taken is reported to the coordinator once the copy has landed, from
// the copy's thread, and later steps' reports queue behind it: the
// coordinator's newest step has its copies on other nodes whenever it was
// a copy step (and the coordinator commits a checkpoint only of a step
// every rank has reported).
class replica_copier {
public:
  using report_sink = std::function<void(step_report&&)>;

  // `durable_step`: what a recovery could resume from before any copy
  // (the checkpoint this epoch resumed from).
  replica_copier(const rank_args& a, int64_t durable_step, report_sink send)
    : a_(a), send_(std::move(send)), done_step_(durable_step) {}
  replica_copier(const replica_copier&) = delete;
  replica_copier& operator=(const replica_copier&) = delete;
  // A copy still in flight (the rank failed mid-step) is aborted.
  ~replica_copier();

  // Starts copying `snap`; waits for the copy in flight first, and returns
  // its error, if it failed.
  status start(const replica_links& links, rank_snapshot_ptr snap);
  // Waits for the copy in flight; its error, if it failed.
  status wait();
  // The error of a copy that has failed meanwhile, without waiting.
  status poll();
  // Sends `r` now, or once the copy in flight has landed.
  void report(step_report r);

private:
  void send_now(step_report& r); // with the lock held

  const rank_args& a_;
  report_sink send_;
  std::thread thread_;
  replica_links links_;
  std::atomic<bool> finished_{false};
  status result_;
  int64_t in_flight_step_ = 0, in_flight_bytes_ = 0;
  std::mutex mutex_; // what the copy's thread and the rank's share:
  bool busy_ = false, failed_ = false;
  std::vector<step_report> held_;
  int64_t done_step_ = 0, done_bytes_ = 0;
  double done_s_ = 0;
};

} // namespace tutti
