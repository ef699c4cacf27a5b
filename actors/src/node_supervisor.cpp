#include "tutti/actors/node_supervisor.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <map>

#include "tutti/actors/checkpoint_writer.hpp"
#include "tutti/actors/data_loader.hpp"
#include "tutti/actors/diag_prober.hpp"
#include "tutti/actors/expert_shard.hpp"
#include "tutti/actors/log.hpp"
#include "tutti/actors/rank.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

namespace {

struct child {
  std::string kind; // "rank", "expert_shard", "data_loader"
  int32_t rank = 0;
};

struct node_supervisor_state {
  static inline const char* name = "node_supervisor";
  node_supervisor_args args;
  std::map<caf::actor_addr, child> children;
  std::map<int32_t, std::vector<caf::actor>> helpers; // loader, shard per rank
  std::vector<caf::actor> ranks;
  checkpoint_writer_actor writer;
  int64_t ranks_running = 0;
  bool started = false;

  std::string who() const {
    return "node " + std::to_string(args.node_rank);
  }
};

using supervisor_pointer =
  node_supervisor_actor::stateful_pointer<node_supervisor_state>;

void on_child_down(supervisor_pointer self, caf::down_msg& dm) {
  auto& st = self->state;
  if (dm.source == st.args.coordinator.address()) {
    if (!dm.reason || dm.reason == caf::exit_reason::normal) {
      // The job ended; our ranks have reported their last step.
      if (st.ranks_running == 0)
        self->quit();
      return;
    }
    // Recovery from a lost coordinator comes with the supervision issue;
    // until then the node cannot go on.
    log_error("node_supervisor", st.who() + " lost the coordinator: "
                                   + self->system().render(dm.reason));
    for (auto& [addr, c] : st.children)
      if (auto h = caf::actor_cast<caf::actor>(addr))
        self->send_exit(h, caf::exit_reason::user_shutdown);
    self->quit(caf::make_error(errc::rank_failed, "coordinator lost"));
    return;
  }
  auto i = st.children.find(dm.source);
  if (i == st.children.end())
    return;
  auto who = i->second;
  st.children.erase(i);
  const bool failed = dm.reason && dm.reason != caf::exit_reason::normal
                      && dm.reason != caf::exit_reason::user_shutdown;
  if (failed) {
    auto why = st.who() + ": " + who.kind + " of rank "
               + std::to_string(who.rank)
               + " failed: " + self->system().render(dm.reason);
    log_error("node_supervisor", why);
    self->send(st.args.coordinator, escalate_atom_v, why);
  }
  if (who.kind == "rank") {
    // The rank is done (or gone): its loader and shard are no longer needed.
    for (auto& h : st.helpers[who.rank])
      self->send_exit(h, caf::exit_reason::user_shutdown);
    st.helpers.erase(who.rank);
    if (--st.ranks_running == 0) {
      // The writer drains its queue (the last checkpoint) before it exits:
      // the exit message queues behind the snapshots.
      self->send_exit(st.writer, caf::exit_reason::user_shutdown);
    }
  }
  if (who.kind == "checkpoint_writer" && st.ranks_running == 0)
    self->quit();
  if (who.kind == "checkpoint_writer" && st.ranks_running > 0) {
    // Without a writer no checkpoint can be saved; say so. (Restarting it
    // comes with the supervision issue.)
    self->send(st.args.coordinator, escalate_atom_v,
               st.who() + ": checkpoint writer stopped");
  }
}

void start_ranks(supervisor_pointer self, int64_t resume_step) {
  auto& st = self->state;
  if (st.started)
    return;
  st.started = true;
  const auto& cfg = st.args.cfg;
  auto& sys = self->system();
  st.writer = spawn_checkpoint_writer(sys, st.args.coordinator);
  self->monitor(st.writer);
  st.children[st.writer.address()] = {"checkpoint_writer", -1};
  for (int64_t local = 0; local < cfg.cluster.nproc_per_node; ++local) {
    const auto rank = static_cast<int32_t>(
      st.args.node_rank * cfg.cluster.nproc_per_node + local);
    auto loader = spawn_data_loader(sys, {cfg, rank});
    auto shard = spawn_expert_shard(sys, {cfg, rank});
    auto r = spawn_rank(sys, {cfg, rank, st.args.coordinator, loader, shard,
                              st.writer, resume_step});
    for (auto& [handle, kind] :
         std::vector<std::pair<caf::actor, std::string>>{
           {caf::actor_cast<caf::actor>(loader), "data_loader"},
           {caf::actor_cast<caf::actor>(shard), "expert_shard"},
           {r, "rank"}}) {
      self->monitor(handle);
      st.children[handle.address()] = {kind, rank};
    }
    st.helpers[rank] = {caf::actor_cast<caf::actor>(loader),
                        caf::actor_cast<caf::actor>(shard)};
    st.ranks.push_back(r);
    ++st.ranks_running;
  }
  log_info("node_supervisor", st.who() + " started "
                                + std::to_string(st.ranks_running) + " ranks");
}

node_supervisor_actor::behavior_type
node_supervisor(supervisor_pointer self, node_supervisor_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  self->set_down_handler(
    [self](caf::down_msg& dm) { on_child_down(self, dm); });
  self->monitor(st.args.coordinator);
  const auto& cfg = st.args.cfg;
  auto address = cfg.cluster.node(st.args.node_rank);
  if (!st.args.rack.empty())
    address.rack = st.args.rack;
  node_registration reg{st.args.node_rank, address.host, address.port,
                        address.rack, cfg.cluster.nproc_per_node,
                        fingerprint_text(cfg)};
  self
    ->request(st.args.coordinator,
              std::chrono::seconds(cfg.cluster.join_timeout_s), register_atom_v,
              reg, caf::actor_cast<caf::actor>(self))
    .then([self](caf::ok_atom) {
            log_info("node_supervisor", self->state.who() + " joined the job");
          },
          [self](caf::error& err) {
            auto why = self->state.who() + " was not admitted: "
                       + self->system().render(err);
            log_error("node_supervisor", why);
            self->quit(caf::make_error(errc::config_refused, why));
          });
  return {
    [self](start_atom, int64_t resume_step) { start_ranks(self, resume_step); },
    [self](diag_atom, int64_t round) {
      auto& st = self->state;
      spawn_diag_prober(self->system(), {st.args.cfg, st.args.node_rank, round,
                                         st.args.coordinator});
    },
    [self](stop_atom) {
      auto& st = self->state;
      if (!st.started) {
        self->quit();
        return;
      }
      // Ranks agree on the step to stop at through their next collective.
      for (auto& r : st.ranks)
        caf::anon_send(r, stop_atom_v);
    },
  };
}

} // namespace

node_supervisor_actor spawn_node_supervisor(caf::actor_system& sys,
                                            node_supervisor_args args) {
  return sys.spawn(node_supervisor, std::move(args));
}

} // namespace tutti
