#pragma once
// Where the ranks of one expert-parallel group sit: each rank on a node,
// each node in a rack (cluster_config.nodes[].rack; nodes without a rack
// share one), and what a link of each class carries. An EP group is ep
// data-parallel ranks of one stage and TP index (job_config::ep_group_of);
// plans are made for rank 0's group and applied to every group, which fits
// where the groups sit on nodes alike (nproc_per_node a multiple of
// ep * tp, or ep * tp a multiple of nproc_per_node).

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti::placement {

enum class link_class { same_rank, intra_node, intra_rack, inter_rack };
const char* to_string(link_class c);

struct topology {
  int64_t ranks = 0;                 // EP group members
  std::vector<int64_t> node_of_rank; // node index (0-based, dense)
  std::vector<int64_t> rack_of_node; // rack index (0-based, dense)
  std::vector<std::string> rack_names;
  double intra_node_gbps = 0, intra_rack_gbps = 0, inter_rack_gbps = 0;

  int64_t nodes() const { return int64_t(rack_of_node.size()); }
  int64_t racks() const { return int64_t(rack_names.size()); }
  int64_t rack_of_rank(int64_t r) const {
    return rack_of_node[node_of_rank[r]];
  }
  link_class link(int64_t a, int64_t b) const;
  double gbps(link_class c) const;

  // From the cluster config: ranks 0..ep_size-1, nproc_per_node to a node,
  // racks by name in order of first appearance. Bandwidths: the *_gbps keys,
  // else the named backends, else 100 Gb/s in a rack, 8x that in a node,
  // 1/8 of it between racks.
  static expected<topology> from_config(const job_config& cfg);
  // A regular layout for tests and plans on paper.
  static topology regular(int64_t racks, int64_t nodes_per_rack,
                          int64_t ranks_per_node);
};

// The link between two world ranks of the job (any EP group): ranks share a
// node by nproc_per_node, nodes a rack by cluster_config.nodes[].rack.
link_class world_link(const job_config& cfg, int64_t a, int64_t b);

// Bandwidth in Gb/s of a link technology named as seed 001 does
// (nvlink_like, infiniband, high_speed_ethernet, ethernet); 0 if unknown.
double backend_gbps(const std::string& name);

} // namespace tutti::placement
