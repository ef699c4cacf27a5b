#pragma once
// journal: the coordinator's durable memory. Owns the daemon's RocksDB
// (store/job_store.hpp): commits a checkpoint once every shard is on disk
// (hashes the shards, writes and fsyncs the MANIFEST, records it with
// sync = true, applies retention), appends events, records the job state.
// Detached: all of it blocks on the disk.

#include <memory>

#include "tutti/protocol/interfaces.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti::store {
class job_store;
}

namespace tutti {

journal_actor spawn_journal(caf::actor_system& sys, job_config cfg,
                            std::shared_ptr<store::job_store> db);

} // namespace tutti
