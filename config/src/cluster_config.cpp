// The coordinator's address and each node's, from cluster_config.

#include <exception>
#include "tutti/base/whole_number.hpp"

#include "tutti/config/job_config.hpp"

namespace tutti {

std::string cluster_config::coordinator_host() const {
  auto colon = coordinator.rfind(':');
  return colon == std::string::npos ? "" : coordinator.substr(0, colon);
}

int64_t cluster_config::coordinator_port() const {
  auto colon = coordinator.rfind(':');
  if (colon == std::string::npos)
    return 0;
  return whole_number(coordinator.substr(colon + 1)).value_or(0);
}

node_address cluster_config::node(int64_t rank) const {
  if (rank >= 0 && rank < static_cast<int64_t>(nodes.size()))
    return nodes[rank];
  return {host, coordinator_port() + 1 + rank, ""};
}

} // namespace tutti
