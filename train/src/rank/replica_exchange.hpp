#pragma once
// A rank's copy of its state to a rank of another node, and that node's
// copy to it, over the world communicator (elastic.replica_interval_steps;
// the pairs from elastic/replica_peers.hpp). Both copies go into the
// node's replica_store, which outlives the rank.

#include "tutti/comm/communicator.hpp"
#include "rank/rank_actor.hpp"

namespace tutti {

// `snap`: this rank's state after snap->step. `bytes_sent`: out.
status exchange_replicas(const rank_args& a, comm::communicator& world,
                         rank_snapshot_ptr snap, int64_t& bytes_sent);

} // namespace tutti
