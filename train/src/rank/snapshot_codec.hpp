#pragma once
// A rank's snapshot as it travels to the peer that keeps its copy
// (elastic.replica_interval_steps): a small header (meta, then each
// tensor's name and shape, in the order the shard file has them) as bytes,
// and each tensor's data straight from the snapshot's memory into the
// copy's, with no serialised copy between. Host byte order: the nodes of
// a job share an architecture.

#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/protocol/local_messages.hpp"

namespace tutti {

std::string encode_snapshot_header(const rank_snapshot& snap);

// The snapshot the header describes, each tensor sized for its data and
// not yet filled; an error naming what is malformed.
expected<std::shared_ptr<rank_snapshot>> decode_snapshot_header(
  const std::string& bytes);

// The snapshot's tensors in that order (its own, then its experts').
std::vector<const owned_tensor*> snapshot_tensors(const rank_snapshot& snap);

} // namespace tutti
