#include "tutti/train/node_supervisor.hpp"

#include "node/node_supervisor_state.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <map>

#include "checkpoint/checkpoint_writer.hpp"
#include "rank/data_loader.hpp"
#include "diag/diag_prober.hpp"
#include "shard/expert_shard.hpp"
#include "tutti/comm/memory_communicator.hpp"
#include "tutti/elastic/shrink_layout.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/placement/job_placement.hpp"
#include "rank/rank_actor.hpp"
#include "tutti/runtime/supervisor.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

namespace {

void report(node_pointer self, const std::string& kind, const std::string& text,
            double seconds = 0) {
  self->send(self->state.args.coordinator, job_event{kind, text, seconds});
}

// Ends the ranks of the current epoch: their communicators are aborted, so
// they leave any collective at once; their helpers stop. The coordinator
// hears (node_aborted) once all are gone, or after a grace period (a rank
// stuck outside a collective is left behind, not waited for).
void abort_ranks(node_pointer self, int64_t report_epoch) {
  auto& st = self->state;
  for (auto& [addr, r] : st.ranks) {
    r.control->abort();
    st.aborting.emplace(addr, std::move(r));
  }
  st.ranks.clear();
  for (auto* sup : {&st.loaders, &st.experts})
    if (*sup) {
      self->demonitor(sup->address());
      self->send(*sup, stop_atom_v);
      *sup = nullptr;
    }
  if (report_epoch >= 0) {
    st.abort_epoch = report_epoch;
    st.abort_deadline = clock_type::now() + std::chrono::seconds(3);
  }
}

void maybe_report_aborted(node_pointer self) {
  auto& st = self->state;
  if (st.abort_epoch < 0)
    return;
  if (!st.aborting.empty() && clock_type::now() < st.abort_deadline)
    return;
  if (!st.aborting.empty())
    log_warn("node_supervisor",
             st.who() + ": " + std::to_string(st.aborting.size())
               + " rank thread(s) did not end within 3 s of the abort; "
                 "going on without them");
  self->send(st.args.coordinator,
             node_aborted{st.args.node_rank, st.abort_epoch});
  st.abort_epoch = -1;
}

supervisor_actor start_helpers(node_pointer self, const char* label,
                               const supervision_spec& spec,
                               std::vector<child_spec> children) {
  auto sup = spawn_supervisor(self->system(), label, flags_of(spec),
                              std::move(children),
                              caf::actor_cast<caf::actor>(self));
  self->monitor(sup);
  return sup;
}

// The placement of an epoch: the coordinator's, when it planned again
// (`expert_at` non-empty), else moe_config.placement's.
expected<placement::placement_plan> epoch_plan(const job_config& cfg,
                                               std::vector<int32_t> expert_at) {
  auto configured = placement::plan_for(cfg);
  if (expert_at.empty() || !configured.ok())
    return configured;
  // The coordinator moves experts; the tokens' first-layer experts
  // (data.rack_affinity) stay the model's.
  placement::placement_plan p = std::move(configured.value());
  p.expert_at = std::move(expert_at);
  if (auto ok = p.check(); !ok)
    return status::error("the coordinator's placement: " + ok.message());
  return p;
}

void start_epoch(node_pointer self, const epoch_start& start) {
  auto& st = self->state;
  const auto& e = start;
  const auto epoch = e.epoch, resume_step = e.resume_step;
  if (epoch <= st.epoch)
    return;
  if (!st.ranks.empty())
    abort_ranks(self, -1);
  st.epoch = epoch;
  // The epoch's layout: all nodes, or the ones the coordinator named (the
  // job goes on without lost nodes, elastic/shrink_layout.hpp).
  const auto& all = st.args.cfg;
  const auto per = all.cluster.nproc_per_node;
  int64_t index = st.args.node_rank;
  if (!e.nodes.empty()) {
    auto at = std::find(e.nodes.begin(), e.nodes.end(), st.args.node_rank);
    if (at == e.nodes.end()) {
      st.epoch_index = -1;
      log_warn("node_supervisor",
               st.who() + ": epoch " + std::to_string(epoch)
                 + " trains without this node; it waits to be taken back");
      return;
    }
    index = at - e.nodes.begin();
  }
  const auto cfg =
    e.nodes.empty() ? all : elastic::config_on_nodes(all, e.nodes);
  // The ranks of this process meet in memory. Under tuttid they are this
  // node's, whose world ranks follow the node's index in the epoch; in one
  // process (tutti run) every node's, and no node is ever left out.
  const auto& process_hub = st.args.memory_hub;
  if (!process_hub || process_hub->rank_count() != per)
    st.hub = process_hub;
  else if (!st.hub || st.hub->first_rank() != index * per)
    st.hub = std::make_shared<comm::memory_hub>(static_cast<int>(index * per),
                                                static_cast<int>(per));
  st.epoch_index = index;
  auto expert_at = e.expert_at;
  auto& sys = self->system();
  if (!st.writers) {
    auto in_flight = st.in_flight;
    auto coordinator = st.args.coordinator;
    st.writers = start_helpers(
      self, "checkpoint_writers", cfg.supervision.checkpoint_writer,
      {{"checkpoint_writer", restart_of(cfg.supervision.checkpoint_writer),
        [coordinator, in_flight,
         min_free = cfg.checkpoint.min_free_gb](caf::actor_system& sys) {
          return caf::actor_cast<caf::actor>(
            spawn_checkpoint_writer(sys, coordinator, in_flight, min_free));
        }}});
  }
  std::vector<child_spec> loaders, experts;
  std::vector<int32_t> local;
  std::map<int32_t, std::shared_ptr<expert_shard_memory>> memories;
  // The placement of this epoch: read once here, so a node's ranks and
  // shards agree, and again at the next epoch (a resume from a checkpoint
  // is where a changed plan takes effect).
  auto plan = epoch_plan(cfg, std::move(expert_at));
  if (!plan.ok())
    log_error("node_supervisor", st.who() + ": " + plan.message());
  auto shared_plan = plan.ok()
                       ? std::make_shared<const placement::placement_plan>(
                         plan.value())
                       : nullptr;
  auto held_by = [&](int32_t rank) {
    return plan.ok() ? plan.value().experts_of_rank(cfg.ep_member_of(rank))
                     : std::vector<int32_t>{};
  };
  for (int64_t i = 0; i < cfg.cluster.nproc_per_node; ++i) {
    const auto rank = static_cast<int32_t>(st.first_rank() + i);
    local.push_back(rank);
    loaders.push_back({"data_loader/" + std::to_string(rank),
                       restart_of(cfg.supervision.data_loader),
                       [cfg, rank, shared_plan](caf::actor_system& sys) {
                         return caf::actor_cast<caf::actor>(
                           spawn_data_loader(sys, {cfg, rank, shared_plan}));
                       }});
    // Kept across restarts of the shard: its step-start snapshot.
    auto memory = std::make_shared<expert_shard_memory>();
    memories[rank] = memory;
    // The core its rank is pinned to, if any (rank.cpp).
    const auto& hub = st.hub;
    const int local_rank = hub ? rank - hub->first_rank() : -1;
    const int in_process = hub ? hub->rank_count() : 0;
    experts.push_back({"expert_shard/" + std::to_string(rank),
                       restart_of(cfg.supervision.expert_shard),
                       [cfg, rank, memory, ids = held_by(rank), local_rank,
                        in_process](caf::actor_system& sys) {
                         return caf::actor_cast<caf::actor>(spawn_expert_shard(
                           sys, {cfg, rank, ids, memory, rank_device(cfg, rank),
                                 local_rank, in_process}));
                       }});
  }
  const auto label = std::to_string(epoch);
  st.loaders = start_helpers(self, ("data_loaders/" + label).c_str(),
                             cfg.supervision.data_loader, std::move(loaders));
  st.experts = start_helpers(self, ("expert_shards/" + label).c_str(),
                             cfg.supervision.expert_shard, std::move(experts));
  for (auto rank : local) {
    auto control = std::make_shared<rank_control>();
    const bool moved = plan.ok() && !plan.value().is_contiguous();
    rank_args ra{cfg, rank, epoch, st.args.coordinator, st.loaders,
                 st.experts, st.writers, control, resume_step, memories[rank],
                 st.in_flight, st.hub, held_by(rank),
                 moved ? plan.value().slot_of() : std::vector<int32_t>{},
                 plan.ok() ? std::string() : plan.message(), nullptr};
    if (cfg.elastic.replica_interval_steps > 0) {
      if (!st.replicas)
        st.replicas = std::make_shared<replica_store>();
      ra.replicas = st.replicas;
    }
    auto r = spawn_rank(sys, std::move(ra));
    self->monitor(r);
    st.ranks[r.address()] = {rank, epoch, r, control};
  }
  publish_node_metrics(self); // the gauge is right before the next tick
  log_info("node_supervisor", st.who() + " started "
                                + std::to_string(local.size())
                                + " ranks (epoch " + label + ", from step "
                                + std::to_string(resume_step) + ")");
}

// The job is over for this node: let the writer drain, then end.
void drain(node_pointer self) {
  auto& st = self->state;
  st.job_over = true;
  if (!st.writers) {
    self->quit();
    return;
  }
  self
    ->request(st.writers, std::chrono::seconds(5), which_child_atom_v,
              std::string("checkpoint_writer"))
    .then(
      [self](caf::actor& writer) {
        auto& st = self->state;
        st.writer = writer;
        self->monitor(writer);
        // The exit message queues behind the snapshots still to write.
        self->demonitor(st.writers.address());
        self->send(st.writers, stop_atom_v);
      },
      [self](caf::error&) { self->quit(); });
}

void on_down(node_pointer self, caf::down_msg& dm) {
  auto& st = self->state;
  const bool normal = !dm.reason || dm.reason == caf::exit_reason::normal;
  if (dm.source == st.args.coordinator.address()) {
    if (normal || st.job_over) {
      if (st.ranks.empty())
        self->quit();
      return;
    }
    log_error("node_supervisor", st.who() + " lost the coordinator: "
                                   + self->system().render(dm.reason));
    abort_ranks(self, -1);
    if (st.writers)
      self->send(st.writers, stop_atom_v);
    self->quit(caf::make_error(errc::coordinator_lost));
    return;
  }
  if (st.writer && dm.source == st.writer.address()) {
    self->quit();
    return;
  }
  if (auto i = st.aborting.find(dm.source); i != st.aborting.end()) {
    st.aborting.erase(i);
    maybe_report_aborted(self);
    return;
  }
  if (auto i = st.ranks.find(dm.source); i != st.ranks.end()) {
    auto r = std::move(i->second);
    st.ranks.erase(i);
    publish_node_metrics(self);
    if (!normal && dm.reason != caf::exit_reason::user_shutdown) {
      // The rank reports its own errors; a rank killed outright cannot.
      auto why = st.who() + ": rank " + std::to_string(r.rank)
                 + " ended: " + self->system().render(dm.reason);
      log_error("node_supervisor", why);
      self->send(st.args.coordinator, rank_failed{r.rank, why, r.epoch});
      return;
    }
    if (st.ranks.empty() && r.control && !r.control->aborted())
      drain(self);
    return;
  }
  // A helper supervisor ended on its own (it escalated first): forget it,
  // so that the next epoch starts a new one.
  for (auto* sup : {&st.writers, &st.loaders, &st.experts})
    if (*sup && dm.source == sup->address())
      *sup = nullptr;
}

void register_node(node_pointer self) {
  auto& st = self->state;
  const auto& cfg = st.args.cfg;
  auto address = cfg.cluster.node(st.args.node_rank);
  if (!st.args.rack.empty())
    address.rack = st.args.rack;
  node_registration reg{st.args.node_rank,
                        address.host,
                        address.port,
                        address.rack,
                        cfg.cluster.nproc_per_node,
                        fingerprint_text(cfg),
                        st.args.environment};
  self
    ->request(st.args.coordinator,
              std::chrono::seconds(cfg.cluster.join_timeout_s), register_atom_v,
              reg, caf::actor_cast<caf::actor>(self))
    .then(
      [self](caf::ok_atom) {
        self->state.registered = true;
        self->state.last_heartbeat = clock_type::now();
        log_info("node_supervisor", self->state.who() + " joined the job");
      },
      [self](caf::error& err) {
        auto why = self->state.who()
                   + " was not admitted: " + self->system().render(err);
        log_error("node_supervisor", why);
        self->quit(caf::make_error(errc::config_refused, why));
      });
}

// Heartbeat: tells the coordinator we live, and learns whether it still
// counts us in. Unanswered past the timeout: our ranks are cut off, end
// them (they would wait in collectives).
void heartbeat(node_pointer self) {
  auto& st = self->state;
  const auto& r = st.args.cfg.recovery;
  self->delayed_send(self, std::chrono::milliseconds(r.heartbeat_interval_ms),
                     tick_atom_v);
  maybe_report_aborted(self);
  publish_node_metrics(self);
  if (!st.registered || st.job_over)
    return;
  self
    ->request(
      st.args.coordinator, std::chrono::milliseconds(r.heartbeat_timeout_ms),
      node_heartbeat{st.args.node_rank, st.epoch, resident_memory_bytes()})
    .then([self](int64_t) { self->state.last_heartbeat = clock_type::now(); },
          [self](caf::error& err) {
            auto& st = self->state;
            if (err.category() == caf::atom("tutti")) {
              // The coordinator no longer counts us: end our ranks, join again.
              log_warn("node_supervisor", st.who()
                                            + ": dropped by the "
                                              "coordinator ("
                                            + self->system().render(err)
                                            + "); joining again");
              abort_ranks(self, -1);
              st.registered = false;
              st.epoch = -1;
              register_node(self);
              return;
            }
            const auto silent = clock_type::now() - st.last_heartbeat;
            if (silent > std::chrono::milliseconds(
                  st.args.cfg.recovery.heartbeat_timeout_ms)
                && !st.ranks.empty()) {
              log_warn("node_supervisor",
                       st.who()
                         + ": no answer from the coordinator; ending "
                           "this node's ranks");
              abort_ranks(self, -1);
            }
          });
}

// Writes the held copies of (epoch, step) of `ranks` as that step's
// checkpoint shards, through the node's checkpoint writer (which reports
// each shard_saved to the coordinator, as for a rank's own write).
void write_replicas(node_pointer self, int64_t epoch, int64_t step,
                    const std::vector<int64_t>& ranks) {
  auto& st = self->state;
  const auto& cfg = st.args.cfg;
  const auto dir = (std::filesystem::path(cfg.checkpoint.root(cfg.run))
                    / store::checkpoint_dir_name(step))
                     .string();
  std::vector<rank_snapshot_ptr> copies;
  for (auto rank : ranks) {
    auto snap = st.replicas ? st.replicas->find(epoch, step, rank) : nullptr;
    if (!snap) {
      self->send(st.args.coordinator,
                 shard_failed{step, static_cast<int32_t>(rank),
                              "no copy of it on " + st.who(), epoch});
      return;
    }
    copies.push_back(std::move(snap));
  }
  if (!st.writers) {
    log_error("node_supervisor", st.who() + ": no checkpoint writer to write "
                                   + "the copies of step "
                                   + std::to_string(step));
    return;
  }
  self->request(st.writers, std::chrono::seconds(10), which_child_atom_v,
                std::string("checkpoint_writer"))
    .then(
      [self, copies, dir](caf::actor& writer) {
        auto handle = caf::actor_cast<checkpoint_writer_actor>(writer);
        for (const auto& snap : copies) {
          self->state.in_flight->add(snap, dir);
          self->send(handle, ckpt_write_atom_v, snap, dir);
        }
      },
      [self, step](caf::error& err) {
        log_error("node_supervisor",
                  self->state.who() + ": writing the copies of step "
                    + std::to_string(step) + ": "
                    + self->system().render(err));
      });
}

node_supervisor_actor::behavior_type node_supervisor(
  node_pointer self, node_supervisor_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  st.board = st.args.board;
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  self->monitor(st.args.coordinator);
  register_node(self);
  self->send(self, tick_atom_v);
  return {
    [self](const epoch_start& e) {
      start_epoch(self, e);
    },
    [self](abort_atom, int64_t epoch) {
      auto& st = self->state;
      log_warn("node_supervisor", st.who() + ": aborting ranks for epoch "
                                    + std::to_string(epoch));
      abort_ranks(self, epoch);
      maybe_report_aborted(self);
    },
    [self](tick_atom) { heartbeat(self); },
    [self](diag_atom, int64_t round) {
      auto& st = self->state;
      spawn_diag_prober(self->system(), {st.args.cfg, st.args.node_rank, round,
                                         st.args.coordinator});
    },
    [self](stop_atom) {
      auto& st = self->state;
      if (st.ranks.empty()) {
        self->quit();
        return;
      }
      // Ranks agree on the step to stop at through their next collective.
      for (auto& [addr, r] : st.ranks)
        caf::anon_send(r.handle, stop_atom_v);
    },
    [self](escalate_atom, const std::string& why) {
      auto& st = self->state;
      log_error("node_supervisor", st.who() + ": escalated: " + why);
      report(self, "escalation", st.who() + ": " + why);
      self->send(st.args.coordinator,
                 rank_failed{-1, st.who() + ": " + why, st.epoch});
    },
    [self](const child_restarted& r) {
      ++self->state.restarts_by_kind[r.id.substr(0, r.id.find('/'))];
      report(self, "restart",
             self->state.who() + ": " + r.id + " restarted after " + r.reason);
    },
    [self](get_coordinator_atom) {
      return caf::actor_cast<caf::actor>(self->state.args.coordinator);
    },
    [self](actors_atom) { return list_actors(self); },
    [self](const log_query& q) -> std::vector<std::string> {
      // Read on this actor's thread: a bounded file read, on demand.
      return read_log_lines(q.level, q.max_lines);
    },
    [self](pause_atom) { request_from_ranks(self, "pause"); },
    [self](resume_atom) { request_from_ranks(self, "resume"); },
    [self](checkpoint_now_atom) { request_from_ranks(self, "checkpoint"); },
    [self](actor_exit_atom, const std::string& path, bool kill) {
      return exit_actor(self, path, kill);
    },
    [self](const job_outcome& outcome) {
      // The job is over (its last checkpoint is committed, or it failed):
      // nothing to wait for, no coordinator to come back to.
      auto& st = self->state;
      st.job_over = true;
      abort_ranks(self, -1);
      if (st.writers)
        self->send(st.writers, stop_atom_v);
      if (outcome.ok)
        self->quit();
      else
        self->quit(
          caf::make_error(errc::rank_failed, "job failed: " + outcome.message));
    },
    [self](drain_atom) {
      // Leave the job for good: its ranks end, the daemon exits and the
      // coordinator waits for a replacement with this node rank.
      auto& st = self->state;
      log_warn("node_supervisor", st.who() + ": drained on request; leaving");
      st.draining = true;
      abort_ranks(self, -1);
      if (st.writers)
        self->send(st.writers, stop_atom_v);
      self->quit();
    },
    [self](replicas_atom) {
      auto& st = self->state;
      return st.replicas ? st.replicas->held() : std::vector<replica_held>{};
    },
    [self](write_replicas_atom, int64_t epoch, int64_t step,
           const std::vector<int64_t>& ranks) {
      write_replicas(self, epoch, step, ranks);
    },
    [self](chaos_atom, const chaos_request& req) -> caf::result<std::string> {
      auto done = inject(self, req);
      if (done.rfind("error: ", 0) == 0)
        return caf::make_error(errc::config_refused, done.substr(7));
      return done;
    },
  };
}

} // namespace

node_supervisor_actor spawn_node_supervisor(caf::actor_system& sys,
                                            node_supervisor_args args) {
  return sys.spawn(node_supervisor, std::move(args));
}

} // namespace tutti
