#include "tutti/elastic/replica_peers.hpp"

namespace tutti::elastic {

namespace {

bool shift_crosses_racks(const job_config& cfg, int64_t shift) {
  const auto& cl = cfg.cluster;
  for (int64_t n = 0; n < cl.nnodes; ++n)
    if (cl.node(n).rack == cl.node((n + shift) % cl.nnodes).rack)
      return false;
  return true;
}

} // namespace

int64_t replica_shift(const job_config& cfg) {
  const auto nodes = cfg.cluster.nnodes;
  if (nodes < 2)
    return 0;
  for (int64_t shift = 1; shift < nodes; ++shift)
    if (shift_crosses_racks(cfg, shift))
      return shift;
  return 1;
}

int64_t replica_target(const job_config& cfg, int64_t rank) {
  const auto per = cfg.cluster.nproc_per_node, nodes = cfg.cluster.nnodes;
  const auto node = rank / per;
  return (node + replica_shift(cfg)) % nodes * per + rank % per;
}

int64_t replica_source(const job_config& cfg, int64_t rank) {
  const auto per = cfg.cluster.nproc_per_node, nodes = cfg.cluster.nnodes;
  const auto node = rank / per;
  return (node + nodes - replica_shift(cfg)) % nodes * per + rank % per;
}

} // namespace tutti::elastic
