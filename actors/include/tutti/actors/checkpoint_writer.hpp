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

#include "tutti/actors/interfaces.hpp"

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace tutti {

// The write in progress, kept by the node supervisor across restarts of
// the writer: a writer that crashed mid-write is restarted and writes it
// again.
struct checkpoint_in_flight {
  std::mutex mutex;
  std::optional<std::pair<rank_snapshot_ptr, std::string>> write;
};

checkpoint_writer_actor
spawn_checkpoint_writer(caf::actor_system& sys, coordinator_actor coordinator,
                        std::shared_ptr<checkpoint_in_flight> in_flight);

} // namespace tutti
