#pragma once
// diag_prober: one per node for one `tutti diag` round. Joins a Gloo group
// of all nodes (rendezvous through the coordinator) and measures the links:
// directional point-to-point bandwidth and latency to every peer, and
// all-to-all bus bandwidth at several sizes, through tutti's communicator
// and through raw gloo::alltoall. Sends its diag_row to the coordinator and
// ends. Detached: it blocks in collectives.
//
// Test hook: TUTTI_DIAG_THROTTLE_GBPS in a daemon's environment makes its
// node send at most that fast, as a slow NIC would.

#include <caf/actor.hpp>

#include "tutti/protocol/interfaces.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti {

struct diag_prober_args {
  job_config cfg;
  int64_t node_rank = 0;
  int64_t round = 0;
  coordinator_actor coordinator;
};

caf::actor spawn_diag_prober(caf::actor_system& sys, diag_prober_args args);

// Builds the printed report from every node's row and names the nodes whose
// outgoing bandwidth is below min_fraction of the reference
// (expected_bandwidth_gbps, or the median over nodes).
diag_report make_diag_report(const job_config& cfg,
                             const std::vector<diag_row>& rows);

} // namespace tutti
