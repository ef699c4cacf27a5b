#pragma once
// Where a rank's in-memory copy of its state goes
// (elastic.replica_interval_steps): the rank of the same local index on
// the node `shift` places on, the smallest shift that puts every node's
// copy in another rack (so a whole rack can be lost), else the next node.
// A rotation: each node sends to one node and receives from one.

#include <cstdint>

#include "tutti/config/job_config.hpp"

namespace tutti::elastic {

// 0 when the layout has one node (no other node to copy to).
int64_t replica_shift(const job_config& cfg);
// The rank that keeps `rank`'s copy, and the rank whose copy `rank` keeps.
int64_t replica_target(const job_config& cfg, int64_t rank);
int64_t replica_source(const job_config& cfg, int64_t rank);

} // namespace tutti::elastic
