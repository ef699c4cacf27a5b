#pragma once
// A node's in-memory copies of ranks' state (elastic.replica_interval_steps):
// its own ranks' snapshots and those of the peers whose copies it keeps.
// The node supervisor holds it across epochs, so the copies outlive the
// ranks that made them: a recovery writes the newest complete step of them
// as a checkpoint and resumes there instead of at the last checkpoint.
// Ranks put from their threads; the supervisor reads: one mutex.

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "tutti/protocol/job_messages.hpp"
#include "tutti/protocol/local_messages.hpp"

namespace tutti {

class replica_store {
public:
  // Keeps `snap` (rank snap->rank after snap->step, epoch snap->epoch of
  // `world` ranks). Each rank keeps its newest three steps, of the newest
  // two epochs (an epoch may fail before its first copy). Three: a copy
  // travels beside the next step, so when a node dies the survivors may
  // have begun copying two steps past the newest one every rank reported
  // (its rank's copy of the one between was still travelling).
  void put(int64_t world, rank_snapshot_ptr snap);
  std::vector<replica_held> held() const;
  rank_snapshot_ptr find(int64_t epoch, int64_t step, int64_t rank) const;

private:
  struct entry {
    int64_t world = 0;
    rank_snapshot_ptr snap;
  };
  mutable std::mutex mutex_;
  // (epoch, rank) -> step -> copy
  std::map<std::pair<int64_t, int64_t>, std::map<int64_t, entry>> copies_;
};

} // namespace tutti
