#include "tutti/placement/topology.hpp"

#include <algorithm>

namespace tutti::placement {

const char* to_string(link_class c) {
  switch (c) {
  case link_class::same_rank:
    return "same_rank";
  case link_class::intra_node:
    return "intra_node";
  case link_class::intra_rack:
    return "intra_rack";
  case link_class::inter_rack:
    return "inter_rack";
  }
  return "?";
}

link_class topology::link(int64_t a, int64_t b) const {
  if (a == b)
    return link_class::same_rank;
  if (node_of_rank[a] == node_of_rank[b])
    return link_class::intra_node;
  if (rack_of_rank(a) == rack_of_rank(b))
    return link_class::intra_rack;
  return link_class::inter_rack;
}

double topology::gbps(link_class c) const {
  switch (c) {
  case link_class::same_rank:
  case link_class::intra_node:
    return intra_node_gbps;
  case link_class::intra_rack:
    return intra_rack_gbps;
  case link_class::inter_rack:
    return inter_rack_gbps;
  }
  return 0;
}

link_class world_link(const job_config& cfg, int64_t a, int64_t b) {
  const int64_t per_node = std::max<int64_t>(cfg.cluster.nproc_per_node, 1);
  const int64_t na = a / per_node, nb = b / per_node;
  if (a == b)
    return link_class::same_rank;
  if (na == nb)
    return link_class::intra_node;
  if (cfg.cluster.node(na).rack == cfg.cluster.node(nb).rack)
    return link_class::intra_rack;
  return link_class::inter_rack;
}

double backend_gbps(const std::string& name) {
  // Typical per-GPU figures: the planner needs ratios, not exact values.
  if (name == "nvlink_like" || name == "nvlink")
    return 400;
  if (name == "infiniband" || name == "roce")
    return 200;
  if (name == "high_speed_ethernet")
    return 50;
  if (name == "ethernet")
    return 10;
  return 0;
}

expected<topology> topology::from_config(const job_config& cfg) {
  const auto& cl = cfg.cluster;
  const int64_t ep = cfg.ep_size();
  if (ep < 1 || cl.nproc_per_node < 1)
    return status::error("topology: ep_size and nproc_per_node must be >= 1");
  topology t;
  t.ranks = ep;
  // The EP group of rank 0 (every group spans the same pattern of nodes),
  // its nodes numbered in order of appearance.
  std::vector<int64_t> nodes;
  for (const int64_t r : cfg.ep_group_of(0)) {
    const int64_t node = r / cl.nproc_per_node;
    if (nodes.empty() || nodes.back() != node)
      nodes.push_back(node);
    t.node_of_rank.push_back(int64_t(nodes.size()) - 1);
  }
  for (const int64_t n : nodes) {
    const std::string rack = cl.node(n).rack;
    auto at = std::find(t.rack_names.begin(), t.rack_names.end(), rack);
    if (at == t.rack_names.end())
      at = t.rack_names.insert(t.rack_names.end(), rack);
    t.rack_of_node.push_back(at - t.rack_names.begin());
  }
  for (const auto* name : {&cl.intra_rack_backend, &cl.inter_rack_backend})
    if (!name->empty() && backend_gbps(*name) == 0)
      return status::error("cluster_config: unknown link backend \"" + *name
                           + "\" (nvlink_like, infiniband, "
                             "high_speed_ethernet, ethernet)");
  t.intra_rack_gbps = cl.intra_rack_gbps > 0 ? cl.intra_rack_gbps
                      : !cl.intra_rack_backend.empty()
                        ? backend_gbps(cl.intra_rack_backend)
                        : 100;
  t.intra_node_gbps = cl.intra_node_gbps > 0 ? cl.intra_node_gbps
                                             : 8 * t.intra_rack_gbps;
  t.inter_rack_gbps = cl.inter_rack_gbps > 0 ? cl.inter_rack_gbps
                      : !cl.inter_rack_backend.empty()
                        ? backend_gbps(cl.inter_rack_backend)
                        : t.intra_rack_gbps / 8;
  return t;
}

topology topology::regular(int64_t racks, int64_t nodes_per_rack,
                           int64_t ranks_per_node) {
  topology t;
  t.ranks = racks * nodes_per_rack * ranks_per_node;
  for (int64_t r = 0; r < t.ranks; ++r)
    t.node_of_rank.push_back(r / ranks_per_node);
  for (int64_t n = 0; n < racks * nodes_per_rack; ++n)
    t.rack_of_node.push_back(n / nodes_per_rack);
  for (int64_t k = 0; k < racks; ++k)
    t.rack_names.push_back("rack" + std::to_string(k));
  t.intra_rack_gbps = 100;
  t.intra_node_gbps = 800;
  t.inter_rack_gbps = 12.5;
  return t;
}

} // namespace tutti::placement
