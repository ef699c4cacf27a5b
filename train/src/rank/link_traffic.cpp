#include "rank/link_traffic.hpp"

#include "tutti/placement/topology.hpp"

namespace tutti {

std::vector<int64_t> bytes_by_link(const job_config& cfg, int64_t rank,
                                   const std::vector<int64_t>& bytes_to) {
  std::vector<int64_t> out(4, 0);
  const auto group = cfg.ep_group_of(rank);
  for (size_t p = 0; p < bytes_to.size() && p < group.size(); ++p) {
    const auto c = placement::world_link(cfg, rank, group[p]);
    out[static_cast<size_t>(c)] += bytes_to[p];
  }
  return out;
}

} // namespace tutti
