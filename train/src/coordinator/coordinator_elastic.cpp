// Elastic training: the job goes on without lost nodes and takes them back.
//   - shrink: a recovery that has waited elastic.shrink_after_s for a lost
//     node (and no spare is on its way) starts the next epoch on the nodes
//     still here, in the layout elastic::shrink_layout derives (fewer
//     data-parallel ranks; the global batch, and so the losses, as they
//     were), from the newest committed checkpoint;
//   - grow: when a lost node (or a spare in its place) is back, the ranks
//     checkpoint and pause at the next step, and the job regroups on the
//     larger layout from that checkpoint, so no step is computed again.
// Either can be refused (below elastic.min_nodes, a layout the nodes
// cannot hold): the job then pauses and says why.

#include "coordinator/coordinator_state.hpp"

#include <caf/send.hpp>

#include <cstdio>
#include <map>

#include "tutti/elastic/shrink_layout.hpp"
#include "tutti/train/capacity_plan.hpp"
#include "tutti/runtime/log.hpp"

namespace tutti {

namespace {

std::vector<int64_t> nodes_here(const coordinator_state& st) {
  std::vector<int64_t> out;
  for (const auto& [node, m] : st.nodes)
    out.push_back(node);
  return out;
}

std::string node_list(const std::vector<int64_t>& nodes) {
  std::string out;
  for (auto n : nodes)
    out += (out.empty() ? "" : ", ") + std::to_string(n);
  return out;
}

} // namespace

int64_t coordinator_state::epoch_world() const {
  return members.empty() ? cfg.cluster.world_size
                         : static_cast<int64_t>(members.size())
                             * cfg.cluster.nproc_per_node;
}

int64_t coordinator_state::node_of_rank(int64_t rank) const {
  const auto index = rank / cfg.cluster.nproc_per_node;
  if (members.empty())
    return index;
  return index >= 0 && index < static_cast<int64_t>(members.size())
           ? members[index]
           : -1;
}

int64_t coordinator_state::epoch_index(int64_t node) const {
  if (members.empty())
    return node;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == node)
      return static_cast<int64_t>(i);
  return -1;
}

epoch_start epoch_start_on(const coordinator_state& st, int64_t from) {
  epoch_start e{from, st.epoch, st.expert_at, st.members};
  // A plan of the coordinator's places the experts on the full layout's
  // expert-parallel ranks; a smaller ep_size places them contiguously.
  if (!st.members.empty()
      && elastic::config_on_nodes(st.cfg, st.members).ep_size()
           != st.cfg.ep_size())
    e.expert_at.clear();
  return e;
}

namespace {

// The newest (epoch, step) of which every rank's copy is held, newer than
// the last checkpoint; or why there is none.
struct replica_choice {
  bool found = false;
  int64_t epoch = 0, step = 0, world = 0;
  std::map<int64_t, std::vector<int64_t>> ranks_by_node;
  std::string why_not;
};

replica_choice choose_replicas(const coordinator_state& st) {
  struct set_of_step {
    int64_t world = 0;
    std::map<int64_t, int64_t> holder; // rank -> node
  };
  std::map<std::pair<int64_t, int64_t>, set_of_step> sets; // (step, epoch)
  for (const auto& [node, h] : st.replicas.held) {
    auto& set = sets[{h.step, h.epoch}];
    set.world = h.world;
    set.holder.emplace(h.rank, node);
  }
  replica_choice out;
  for (auto i = sets.rbegin(); i != sets.rend(); ++i) {
    const auto [step, epoch] = i->first;
    const auto& set = i->second;
    if (step <= st.last_committed)
      break;
    // A step whose report the metrics lack (a rank died before sending
    // it) would be missing from them: not resumed past.
    if (step > st.last_step)
      continue;
    if (static_cast<int64_t>(set.holder.size()) < set.world) {
      if (out.why_not.empty()) {
        std::string lost;
        for (int64_t r = 0; r < set.world; ++r)
          if (!set.holder.count(r))
            lost += (lost.empty() ? "" : ", ") + std::to_string(r);
        out.why_not = "the copies of step " + std::to_string(step)
                      + " of ranks " + lost
                      + " were only on lost nodes (their copies and "
                        "their own state were in the same place)";
      }
      continue;
    }
    out.found = true;
    out.epoch = epoch, out.step = step, out.world = set.world;
    for (const auto& [rank, node] : set.holder)
      out.ranks_by_node[node].push_back(rank);
    return out;
  }
  if (out.why_not.empty())
    out.why_not = "no copy newer than the checkpoint of step "
                  + std::to_string(st.last_committed);
  return out;
}

void give_up_replicas(coordinator_pointer self, const std::string& why) {
  auto& st = self->state;
  st.replicas.phase = replica_resume::done;
  auto text = "resuming from the checkpoint of step "
              + std::to_string(st.last_committed)
              + ", not from in-memory copies: " + why;
  log_warn("coordinator", text);
  record_event(self, "replica_fallback", text, 0);
}

} // namespace

bool resume_from_replicas(coordinator_pointer self) {
  auto& st = self->state;
  auto& r = st.replicas;
  if (st.cfg.elastic.replica_interval_steps <= 0
      || r.phase == replica_resume::done)
    return false;
  if (r.phase == replica_resume::idle) {
    r = replica_resume{};
    r.phase = replica_resume::asking;
    r.began = coordinator_clock::now();
    r.answers_due = static_cast<int64_t>(st.nodes.size());
    for (auto& [node, m] : st.nodes)
      self
        ->request(m.supervisor, std::chrono::seconds(5), replicas_atom_v)
        .then(
          [self, node = node](std::vector<replica_held>& held) {
            auto& r = self->state.replicas;
            for (auto& h : held)
              r.held.emplace_back(node, h);
            --r.answers_due;
            check_recovery(self);
          },
          [self](caf::error&) {
            --self->state.replicas.answers_due; // its copies are not counted
            check_recovery(self);
          });
    return true;
  }
  if (r.phase == replica_resume::asking) {
    if (r.answers_due > 0)
      return true;
    auto choice = choose_replicas(st);
    if (!choice.found) {
      give_up_replicas(self, choice.why_not);
      return false;
    }
    r.phase = replica_resume::writing;
    r.epoch = choice.epoch, r.step = choice.step, r.world = choice.world;
    r.began = coordinator_clock::now();
    for (auto& [node, ranks] : choice.ranks_by_node) {
      auto m = st.nodes.find(node);
      if (m == st.nodes.end()) {
        give_up_replicas(self, st.node_name(node) + " left while asked");
        return false;
      }
      self->send(m->second.supervisor, write_replicas_atom_v, choice.epoch,
                 choice.step, ranks);
    }
    return true;
  }
  // Writing: each shard reports; a node that dies meanwhile never does.
  if (seconds_since(r.began) > 120) {
    give_up_replicas(self, "the copies of step " + std::to_string(r.step)
                             + " were not written within 120 s");
    return false;
  }
  return true;
}

bool on_replica_saved(coordinator_pointer self, const shard_saved& s) {
  auto& st = self->state;
  auto& r = st.replicas;
  if (r.phase != replica_resume::writing || s.step != r.step
      || s.epoch != r.epoch)
    return false;
  r.saved.insert(s.rank);
  if (static_cast<int64_t>(r.saved.size()) < r.world)
    return true;
  const auto t0 = coordinator_clock::now();
  st.committing.insert(r.step);
  self
    ->request(st.journal, std::chrono::seconds(120),
              commit_request{r.step, r.world, r.epoch})
    .then(
      [self, t0](int64_t bytes) {
        auto& st = self->state;
        auto& r = st.replicas;
        st.committing.erase(r.step);
        st.last_committed = std::max(st.last_committed, r.step);
        r.phase = replica_resume::done;
        auto text = "the in-memory copies of step " + std::to_string(r.step)
                    + " written as its checkpoint ("
                    + std::to_string(bytes) + " bytes, "
                    + std::to_string(seconds_since(t0)) + " s)";
        log_info("coordinator", text);
        record_event(self, "replica_resume", text, seconds_since(t0));
        check_recovery(self);
      },
      [self](caf::error& err) {
        auto& st = self->state;
        st.committing.erase(st.replicas.step);
        give_up_replicas(self, "committing the copies failed: "
                                 + self->system().render(err));
        check_recovery(self);
      });
  return true;
}

bool on_replica_failed(coordinator_pointer self, const shard_failed& f) {
  auto& st = self->state;
  auto& r = st.replicas;
  if (r.phase != replica_resume::writing || f.step != r.step
      || f.epoch != r.epoch)
    return false;
  give_up_replicas(self, "writing the copy of rank " + std::to_string(f.rank)
                           + " failed: " + f.reason);
  check_recovery(self);
  return true;
}

namespace {

// A smaller layout puts more experts (and, sharded, more of the moments)
// on each rank: it must still fit the devices' memory. Only where the
// job's own layout fits it: a budget the full job already exceeds (the
// plan is an estimate; exceeding it is a warning at start) limits nothing.
elastic::layout_fits fits_device_memory(const job_config& full) {
  const double budget = full.cluster.device_memory_gb * 1e9;
  if (budget <= 0 || train::make_capacity_plan(full).total_bytes > budget)
    return {};
  return [budget](const job_config& cfg) -> status {
    const auto plan = train::make_capacity_plan(cfg);
    if (plan.total_bytes <= budget)
      return {};
    char text[160];
    std::snprintf(text, sizeof(text),
                  "world %lld needs %.3g GB per rank, over "
                  "cluster_config.device_memory_gb (%.3g)",
                  static_cast<long long>(cfg.cluster.world_size),
                  plan.total_bytes / 1e9, budget / 1e9);
    return status::error(text);
  };
}

} // namespace

bool try_shrink(coordinator_pointer self, const std::string& missing) {
  auto& st = self->state;
  if (st.cfg.elastic.min_nodes <= 0)
    return false;
  for (const auto& [node, rack] : st.left_rack)
    if (st.assigned.count(node))
      return true; // a spare takes its place: wait for it
  if (!st.regrouping
      && seconds_since(st.recovery_began) < st.cfg.elastic.shrink_after_s)
    return true;
  for (const auto& [node, m] : st.nodes)
    if (!st.aborted_nodes.count(node))
      return true;
  if (!st.committing.empty() || resume_from_replicas(self))
    return true;
  auto layout = elastic::shrink_layout(st.cfg, nodes_here(st),
                                       fits_device_memory(st.cfg));
  if (!layout.ok()) {
    if (!st.paused) {
      st.paused = true;
      auto text = "job paused: it cannot go on without " + missing + ": "
                  + layout.message()
                  + "; it resumes by itself when they come back";
      st.pause_reason = text;
      log_error("coordinator", "ALERT critical: " + text);
      record_event(self, "pause", text, seconds_since(st.recovery_began));
    }
    return true;
  }
  const bool regrouping = st.regrouping;
  st.members = layout.value().nodes;
  st.layout_summary = layout.value().summary;
  auto text = (regrouping ? "regrouping with " + missing + " still missing: "
                          : "going on without " + missing + ": ")
              + st.layout_summary;
  log_warn("coordinator", text);
  record_event(self, "shrink", text, seconds_since(st.recovery_began));
  restart_from_checkpoint(self);
  return true;
}

void begin_grow(coordinator_pointer self, int64_t node) {
  auto& st = self->state;
  auto larger = elastic::shrink_layout(st.cfg, nodes_here(st),
                                       fits_device_memory(st.cfg));
  if (!larger.ok() || larger.value().nodes.size() <= st.members.size()) {
    auto text = st.node_name(node)
                + " is back; the layout has no room for it yet, so it waits";
    log_info("coordinator", text);
    record_event(self, "node_joined", text, 0);
    return;
  }
  auto text = st.node_name(node) + " is back; the ranks checkpoint and pause "
              + "at the next step, and the job regroups on nodes "
              + node_list(larger.value().nodes) + " from it";
  log_info("coordinator", text);
  record_event(self, "node_joined", text, 0);
  if (st.grow_requested_at >= 0)
    return; // already asked; that checkpoint serves this node too
  st.grow_requested_at = st.last_step;
  for (auto member : st.members)
    if (auto m = st.nodes.find(member); m != st.nodes.end()) {
      self->send(m->second.supervisor, checkpoint_now_atom_v);
      self->send(m->second.supervisor, pause_atom_v);
    }
}

void on_commit_for_grow(coordinator_pointer self, int64_t step,
                        bool committed) {
  auto& st = self->state;
  // The checkpoint asked for (the ranks pause after it); its step's
  // reports may still be on their way.
  if (st.grow_requested_at < 0 || step <= st.grow_requested_at
      || st.state != job_state::running)
    return;
  st.grow_checkpoint = {step, committed};
  maybe_regroup(self);
}

void maybe_regroup(coordinator_pointer self) {
  auto& st = self->state;
  // Only at the newest step reported: an interval checkpoint committed
  // while the ranks went on to the one asked for would leave a step done
  // behind; that one's commit comes next.
  if (st.grow_checkpoint.first <= 0 || st.last_step != st.grow_checkpoint.first
      || st.state != job_state::running)
    return;
  const auto [step, committed] = st.grow_checkpoint;
  st.grow_checkpoint = {0, false};
  st.grow_requested_at = -1;
  st.state = job_state::recovering;
  st.regrouping = true;
  // The checkpoint just committed is the newest state there is.
  st.replicas.phase = replica_resume::done;
  ++st.epoch;
  st.recovery_began = coordinator_clock::now();
  st.aborted_nodes.clear();
  st.recovery_cause =
    committed ? "taking back returned nodes at the checkpoint of step "
                  + std::to_string(step)
              : "taking back returned nodes; the checkpoint of step "
                  + std::to_string(step) + " failed, so steps after "
                  + std::to_string(st.last_committed) + " are trained again";
  log_info("coordinator", st.recovery_cause);
  record_event(self, "grow", st.recovery_cause, 0);
  for (auto& [node, m] : st.nodes)
    self->send(m.supervisor, abort_atom_v, st.epoch);
  check_recovery(self);
}

} // namespace tutti
