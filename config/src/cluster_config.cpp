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

std::vector<int64_t> job_config::chunk_layer_counts() const {
  const auto& cl = cluster;
  const int64_t chunks = pp_size() * cl.pipeline_virtual_stages;
  if (cl.pipeline_virtual_stages == 1)
    return stage_layer_counts();
  if (!cl.pipeline_layers.empty())
    return cl.pipeline_layers;
  return std::vector<int64_t>(static_cast<size_t>(chunks),
                              model.num_hidden_layers / chunks);
}

std::vector<int64_t> job_config::stage_layer_counts() const {
  const auto& cl = cluster;
  const int64_t stages = pp_size();
  if (cl.pipeline_virtual_stages > 1) { // each stage's chunks, summed
    const auto chunks = chunk_layer_counts();
    std::vector<int64_t> out(static_cast<size_t>(stages), 0);
    for (size_t k = 0; k < chunks.size(); ++k)
      out[k % static_cast<size_t>(stages)] += chunks[k];
    return out;
  }
  if (!cl.pipeline_layers.empty())
    return cl.pipeline_layers;
  std::vector<int64_t> out(static_cast<size_t>(stages), 0);
  int64_t rest = model.num_hidden_layers, shared = stages;
  if (stages > 1 && cl.pipeline_first_stage_layers > 0) {
    out.front() = cl.pipeline_first_stage_layers;
    rest -= out.front();
    --shared;
  }
  if (stages > 1 && cl.pipeline_last_stage_layers > 0) {
    out.back() = cl.pipeline_last_stage_layers;
    rest -= out.back();
    --shared;
  }
  for (auto& n : out)
    if (n == 0)
      n = shared > 0 ? rest / shared : 0;
  return out;
}

} // namespace tutti
