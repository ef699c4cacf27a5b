// Topology-aware rescheduling. Spare daemons (tuttid --spare --rack R) wait
// with the coordinator; when a node is lost or drained, a spare takes its
// node rank, and with it its ranks and their experts:
//   - a spare of the node's own rack when one is free there: the experts
//     stay in that rack and the placement is kept;
//   - else a spare of another rack, and the planner runs again on the
//     routing statistics seen so far and the new topology (the node now in
//     the spare's rack); the next epoch applies that plan (epoch_start
//     carries it) and resumes from the checkpoint, which moves the experts.
// Each choice is a "reschedule" event that says which, and why.

#include "coordinator/coordinator_state.hpp"

#include <caf/send.hpp>

#include <algorithm>

#include "tutti/runtime/log.hpp"
#include "tutti/placement/job_placement.hpp"
#include "tutti/placement/planner.hpp"
#include "tutti/placement/topology.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

namespace {

std::string rack_text(const std::string& rack) { return "'" + rack + "'"; }

// The racks of the cluster's nodes as they are now: registered nodes by
// their registration, nodes that left by the rack they had, `node` by
// `rack` (the spare about to take it).
job_config with_racks(const coordinator_state& st, int64_t node,
                      const std::string& rack) {
  auto cfg = st.cfg;
  auto& cl = cfg.cluster;
  std::vector<node_address> nodes;
  for (int64_t n = 0; n < cl.nnodes; ++n) {
    auto a = cl.node(n);
    if (auto m = st.nodes.find(n); m != st.nodes.end())
      a.rack = m->second.info.rack;
    else if (auto l = st.left_rack.find(n); l != st.left_rack.end())
      a.rack = l->second;
    if (n == node)
      a.rack = rack;
    nodes.push_back(a);
  }
  cl.nodes = std::move(nodes);
  return cfg;
}

// The planner again, for the topology with `node` in `rack`. Returns the
// event's account of it; sets st.expert_at when there is a new plan.
std::string plan_again(coordinator_state& st, int64_t node,
                       const std::string& rack) {
  if (st.routing_seen.layers == 0 || st.routing_seen.tokens == 0)
    return "no routing statistics yet (moe_config.routing_stats_window), so "
           "the placement is kept";
  const auto cfg = with_racks(st, node, rack);
  auto topo = placement::topology::from_config(cfg);
  if (!topo.ok())
    return "the planner could not run (" + topo.message()
           + "); the placement is kept";
  auto plan = placement::plan_rack_aware(st.routing_seen, topo.value());
  if (!plan.ok())
    return "the planner could not run (" + plan.message()
           + "); the placement is kept";
  // What the kept placement would cost in the new topology, against the
  // new plan (training: 4 crossings of hidden_size floats per token).
  placement::placement_plan kept;
  if (!st.expert_at.empty()) {
    kept = plan.value();
    kept.expert_at = st.expert_at;
  } else if (auto from_config = placement::plan_for(st.cfg);
             from_config.ok()) {
    kept = from_config.value();
  } else {
    kept = placement::placement_plan::contiguous(
      cfg.model.num_hidden_layers, cfg.moe.num_experts, cfg.ep_size());
  }
  const double bytes = 4.0 * cfg.model.hidden_size * sizeof(float);
  const auto before = placement::evaluate(kept, st.routing_seen, topo.value(),
                                          bytes);
  const auto after = placement::evaluate(plan.value(), st.routing_seen,
                                         topo.value(), bytes);
  st.expert_at = plan.value().expert_at;
  return "the planner ran again on the statistics of steps "
         + std::to_string(st.routing_seen.first_step) + ".."
         + std::to_string(st.routing_seen.last_step)
         + ": expected cross-rack bytes per token "
         + std::to_string(static_cast<int64_t>(before.cross_rack_flat))
         + " with the placement kept, "
         + std::to_string(static_cast<int64_t>(after.cross_rack_flat))
         + " with the new plan (load imbalance "
         + std::to_string(after.imbalance)
         + "); the next epoch applies it";
}

} // namespace

caf::result<caf::ok_atom> on_spare(coordinator_pointer self,
                                   const node_registration& reg,
                                   const caf::actor& handle) {
  auto& st = self->state;
  auto refuse = [&](const std::string& why) -> caf::result<caf::ok_atom> {
    log_error("coordinator", "refused a spare from " + reg.host + ": " + why);
    return caf::make_error(errc::config_refused, why);
  };
  // A node certificate names one node rank: a spare has none yet.
  if (st.cfg.security.tls_on())
    return refuse("spares need security off (a node certificate names its "
                  "node rank)");
  if (reg.config_fingerprint != st.fingerprint)
    return refuse("config differs from the coordinator's: "
                  + first_difference(reg.config_fingerprint, st.fingerprint));
  if (reg.devices != st.cfg.cluster.nproc_per_node)
    return refuse("a spare must host nproc_per_node ranks");
  if (st.ended())
    return refuse("the job is over");
  self->monitor(handle);
  st.spares.push_back({reg, handle});
  auto text = "a spare joined from " + reg.host + " in rack "
              + rack_text(reg.rack) + " (" + std::to_string(st.spares.size())
              + " waiting)";
  log_info("coordinator", text);
  record_event(self, "spare_joined", text, 0);
  reschedule(self);
  return caf::ok_atom_v;
}

void reschedule(coordinator_pointer self) {
  auto& st = self->state;
  // While a smaller layout trains, a spare taking a lost node's rank is
  // taken in as that node returning (coordinator_elastic.cpp).
  const bool shrunk = st.state == job_state::running && !st.members.empty();
  if (st.state != job_state::recovering && !shrunk)
    return;
  for (const auto& [node, rack] : st.left_rack) {
    if (st.spares.empty())
      return;
    if (st.nodes.count(node) || st.assigned.count(node))
      continue;
    auto same = std::find_if(st.spares.begin(), st.spares.end(),
                             [&](const spare_daemon& s) {
                               return s.info.rack == rack;
                             });
    const bool in_rack = same != st.spares.end();
    auto chosen = in_rack ? same : st.spares.begin();
    auto text = st.node_name(node) + " of rack " + rack_text(rack)
                + " left; ";
    if (in_rack)
      text += "a spare in the same rack (" + chosen->info.host
              + ") takes its ranks and experts: placement kept";
    else
      text += "no spare free in rack " + rack_text(rack) + "; a spare in rack "
              + rack_text(chosen->info.rack) + " (" + chosen->info.host
              + ") takes its ranks, and "
              + plan_again(st, node, chosen->info.rack);
    log_warn("coordinator", text);
    record_event(self, in_rack ? "reschedule_in_rack" : "reschedule_replanned",
                 text, 0);
    self->demonitor(chosen->handle);
    caf::anon_send(chosen->handle, assign_atom_v, node);
    st.assigned.insert(node);
    st.spares.erase(chosen);
  }
}

bool on_spare_down(coordinator_pointer self, const caf::actor_addr& source) {
  auto& st = self->state;
  auto i = std::find_if(st.spares.begin(), st.spares.end(),
                        [&](const spare_daemon& s) {
                          return s.handle.address() == source;
                        });
  if (i == st.spares.end())
    return false;
  log_warn("coordinator", "a spare in rack " + rack_text(i->info.rack)
                            + " went away");
  st.spares.erase(i);
  return true;
}

void release_spares(coordinator_pointer self) {
  auto& st = self->state;
  for (auto& s : st.spares)
    caf::anon_send(s.handle, job_outcome{st.state != job_state::failed,
                                         st.failure, st.final_eval_loss});
  st.spares.clear();
}

void observe_routing(coordinator_pointer self, const std::string& window) {
  auto& st = self->state;
  auto stats = placement::routing_stats::from_json(window);
  if (!stats.ok())
    return; // the journal keeps it as it came; the planner goes without
  if (st.routing_seen.layers == 0) {
    st.routing_seen = std::move(stats.value());
    return;
  }
  // Steps trained again after a recovery's rewind are counted once.
  if (stats.value().first_step <= st.routing_seen.last_step)
    return;
  if (auto merged = st.routing_seen.merge(stats.value()); !merged)
    log_warn("coordinator", "routing statistics: " + merged.message());
}

} // namespace tutti
