#pragma once
// checkpoint_writer: one per node. Writes the snapshots its ranks took at a
// step boundary as shard files (store/checkpoint_files.hpp), while the ranks
// train on, and reports each to the coordinator. Detached: it writes and
// fsyncs files.
//
// Fault injection: (chaos_atom, "crash_checkpoint") makes the next write
// fail half-way with an exception.
//
// Test hook: TUTTI_CKPT_WRITE_DELAY_MS holds each finished shard that long
// before reporting it, so a drill can crash the job mid-checkpoint.

#include "tutti/protocol/interfaces.hpp"

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace tutti {

// The node's writes not yet done, kept by the node supervisor across
// restarts of the writer: ranks add theirs before they message the writer,
// the writer removes each once written (or failed). A restarted writer
// starts with whatever its predecessor left, the write it crashed in and
// the ones queued behind it.
struct checkpoint_in_flight {
  std::mutex mutex;
  std::deque<std::pair<rank_snapshot_ptr, std::string>> writes;

  void add(rank_snapshot_ptr snap, std::string dir) {
    std::lock_guard<std::mutex> guard(mutex);
    writes.emplace_back(std::move(snap), std::move(dir));
  }
  void done(const rank_snapshot_ptr& snap) {
    std::lock_guard<std::mutex> guard(mutex);
    for (auto i = writes.begin(); i != writes.end(); ++i)
      if (i->first == snap) {
        writes.erase(i);
        return;
      }
  }
};

// `min_free_gb`: checkpoint.min_free_gb. A shard that would not fit with
// that much left free is not written (shard_failed); when the next one
// would not fit, the coordinator gets an alert before the disk is full.
checkpoint_writer_actor spawn_checkpoint_writer(
  caf::actor_system& sys, coordinator_actor coordinator,
  std::shared_ptr<checkpoint_in_flight> in_flight, double min_free_gb = 0);

} // namespace tutti
