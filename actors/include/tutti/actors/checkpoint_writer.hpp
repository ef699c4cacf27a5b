#pragma once
// checkpoint_writer: one per node. Writes the snapshots its ranks took at a
// step boundary as shard files (store/checkpoint_files.hpp), while the ranks
// train on, and reports each to the coordinator. Detached: it writes and
// fsyncs files.
//
// Test hook: TUTTI_CKPT_WRITE_DELAY_MS holds each finished shard that long
// before reporting it, so a drill can crash the job mid-checkpoint.

#include "tutti/actors/interfaces.hpp"

namespace tutti {

checkpoint_writer_actor spawn_checkpoint_writer(caf::actor_system& sys,
                                                coordinator_actor coordinator);

} // namespace tutti
