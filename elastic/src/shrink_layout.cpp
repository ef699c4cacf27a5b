#include "tutti/elastic/shrink_layout.hpp"

#include <algorithm>

namespace tutti::elastic {

namespace {

std::string list_text(const std::vector<int64_t>& v) {
  std::string out;
  for (auto n : v)
    out += (out.empty() ? "" : ", ") + std::to_string(n);
  return out;
}

// The largest divisor of the experts and `dp` that is at most `limit`.
int64_t expert_parallel_size(int64_t experts, int64_t dp, int64_t limit) {
  for (int64_t ep = std::min(limit, dp); ep > 1; --ep)
    if (experts % ep == 0 && dp % ep == 0)
      return ep;
  return 1;
}

} // namespace

job_config config_on_nodes(const job_config& full,
                           const std::vector<int64_t>& nodes) {
  auto cfg = full;
  auto& cl = cfg.cluster;
  if (static_cast<int64_t>(nodes.size()) == full.cluster.nnodes)
    return cfg;
  std::vector<node_address> addresses;
  for (auto n : nodes)
    addresses.push_back(full.cluster.node(n));
  cl.nodes = std::move(addresses);
  cl.nnodes = static_cast<int64_t>(nodes.size());
  cl.world_size = cl.nnodes * cl.nproc_per_node;
  const int64_t ep = expert_parallel_size(
    cfg.moe.num_experts, std::max<int64_t>(1, cfg.dp_size()), cl.ep_size);
  if (ep != cl.ep_size) {
    cl.ep_size = ep;
    cfg.moe.placement.clear();
  }
  return cfg;
}

expected<shrunk_layout> shrink_layout(const job_config& full,
                                      std::vector<int64_t> survivors,
                                      const layout_fits& fits) {
  std::sort(survivors.begin(), survivors.end());
  const auto count = static_cast<int64_t>(survivors.size());
  const auto least = std::max<int64_t>(1, full.elastic.min_nodes);
  if (count < least)
    return status::error(
      std::to_string(count) + " node" + (count == 1 ? "" : "s")
      + " left, fewer than elastic.min_nodes ("
      + std::to_string(full.elastic.min_nodes) + ")");
  std::string first_refusal;
  for (int64_t k = count; k >= least; --k) {
    std::vector<int64_t> nodes(survivors.begin(), survivors.begin() + k);
    auto cfg = config_on_nodes(full, nodes);
    auto ok = check_job_config(cfg);
    if (ok.ok() && fits)
      ok = fits(cfg);
    if (!ok) {
      if (first_refusal.empty())
        first_refusal = ok.message();
      continue;
    }
    shrunk_layout out;
    out.nodes = nodes;
    out.idle.assign(survivors.begin() + k, survivors.end());
    out.summary =
      "world " + std::to_string(cfg.cluster.world_size) + " on node"
      + (k == 1 ? " " : "s ") + list_text(nodes) + " (data-parallel size "
      + std::to_string(cfg.dp_size()) + ", ep_size "
      + std::to_string(cfg.ep_size())
      + (cfg.ep_size() != full.ep_size()
           ? " instead of " + std::to_string(full.ep_size())
           : "")
      + ")"
      + (out.idle.empty() ? ""
                          : "; node" + std::string(out.idle.size() == 1 ? " " : "s ")
                              + list_text(out.idle) + " wait"
                              + (out.idle.size() == 1 ? "s" : "")
                              + ": with them the layout fails (" + first_refusal
                              + ")");
    out.cfg = std::move(cfg);
    return out;
  }
  return status::error("no layout on " + std::to_string(least) + " to "
                       + std::to_string(count) + " of nodes "
                       + list_text(survivors) + ": " + first_refusal);
}

} // namespace tutti::elastic
