#pragma once
// A rank's snapshot as bytes and back, for the copy a rank keeps on a peer
// of another node (elastic.replica_interval_steps): the shard file's
// content (meta, then every tensor in file order) without the file. Host
// byte order: the nodes of a job share an architecture.

#include <string>

#include "tutti/base/status.hpp"
#include "tutti/protocol/local_messages.hpp"

namespace tutti {

std::string encode_snapshot(const rank_snapshot& snap);

// The snapshot `bytes` holds (its tensors flat, as written); an error
// naming what is malformed.
expected<rank_snapshot_ptr> decode_snapshot(const std::string& bytes);

} // namespace tutti
