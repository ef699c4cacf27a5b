#include "tutti/serve/serve_layout.hpp"

#include <string>

#include "tutti/placement/routing_stats.hpp"
#include "tutti/serve/offload_layout.hpp"
#include "tutti/store/atomic_file.hpp"

namespace tutti::serve {

namespace {

std::string shape_text(int64_t experts, int64_t layers, int64_t ranks) {
  return std::to_string(experts) + " experts of " + std::to_string(layers)
         + " layers on " + std::to_string(ranks) + " ranks";
}

expected<expert_layout> base_layout(const serve_config& c,
                                    const model_shape& s, int64_t ranks) {
  // Offload moves experts between ranks anyway: the ranks need not divide
  // the experts then.
  if (c.placement.empty() && c.offload.enabled())
    return expert_layout::blocks(s.layers, s.experts, ranks);
  if (c.placement.empty()) {
    auto x = expert_layout::contiguous(s.layers, s.experts, ranks);
    if (!x)
      return status::error("serve.ep_size: " + x.message());
    return x;
  }
  auto plan = placement::placement_plan::read(c.placement);
  if (!plan)
    return status::error("serve.placement: " + plan.message());
  const auto& p = plan.value();
  if (p.layers != s.layers || p.experts != s.experts || p.ranks != ranks)
    return status::error("serve.placement: " + c.placement + " places "
                         + shape_text(p.experts, p.layers, p.ranks)
                         + "; the replica serves "
                         + shape_text(s.experts, s.layers, ranks));
  return expert_layout::from_plan(p);
}

expected<std::vector<int64_t>> offload_load(const offload_config& o,
                                            const model_shape& s) {
  auto text = store::read_file(o.stats);
  if (!text)
    return status::error("serve.offload.stats: " + text.message());
  auto stats = placement::routing_stats::from_json(text.value());
  if (!stats)
    return status::error("serve.offload.stats: " + o.stats + ": "
                         + stats.message());
  const auto& st = stats.value();
  if (st.layers != s.layers || st.experts != s.experts)
    return status::error("serve.offload.stats: " + o.stats + " counts "
                         + std::to_string(st.experts) + " experts of "
                         + std::to_string(st.layers) + " layers; the model has "
                         + std::to_string(s.experts) + " experts of "
                         + std::to_string(s.layers) + " layers");
  return st.load;
}

int64_t replica_ranks(const serve_config& c) {
  const auto& cl = c.limits.cluster;
  return cl.spans_daemons()
           ? static_cast<int64_t>(cl.nodes.size()) * c.limits.ep_ranks
           : c.limits.ep_ranks;
}

} // namespace

expected<replan_config> replan_for(const serve_config& c) {
  replan_config out;
  if (c.racks.empty())
    return out;
  auto racks = rack_indices(c.racks, replica_ranks(c));
  if (!racks)
    return racks.error();
  out.rack = std::move(racks.value());
  out.max_cross_rack_share = c.replan ? c.max_cross_rack_share : 1.0;
  out.window_steps = c.replan_window_steps;
  return out;
}

expected<std::shared_ptr<const request_affinity>> affinity_for(
  const serve_config& c) {
  if (!c.rack_affinity)
    return std::shared_ptr<const request_affinity>();
  auto racks = rack_indices(c.racks, replica_ranks(c));
  if (!racks)
    return racks.error();
  auto plan = placement::placement_plan::read(c.placement);
  if (!plan)
    return status::error("serve.placement: " + plan.message());
  return request_affinity::from_plan(
    plan.value(),
    std::vector<int64_t>(racks.value().begin(), racks.value().end()));
}

expected<std::shared_ptr<const expert_layout>> layout_for(
  const serve_config& c, const model_shape& s) {
  if (c.placement.empty() && !c.offload.enabled())
    return std::shared_ptr<const expert_layout>();
  const auto& cl = c.limits.cluster;
  const int64_t ranks = replica_ranks(c);
  if (ranks < 1)
    return status::error(std::string(c.placement.empty() ? "serve.offload"
                                                         : "serve.placement")
                         + ": needs expert-parallel ranks (serve.ep_size)");
  auto base = base_layout(c, s, ranks);
  if (!base)
    return base.error();
  if (!c.offload.enabled())
    return std::make_shared<const expert_layout>(std::move(base.value()));
  if (c.offload.rank >= ranks)
    return status::error("serve.offload.rank: " + std::to_string(c.offload.rank)
                         + " is not one of the replica's "
                         + std::to_string(ranks) + " ranks"
                         + (cl.spans_daemons() ? " (serve.nodes x ep_size)"
                                               : " (serve.ep_size)"));
  auto load = offload_load(c.offload, s);
  if (!load)
    return load.error();
  auto out = with_offload(base.value(), load.value(), c.offload.threshold,
                          c.offload.rank);
  if (!out)
    return status::error("serve.offload: " + out.message());
  return std::make_shared<const expert_layout>(std::move(out.value()));
}

} // namespace tutti::serve
