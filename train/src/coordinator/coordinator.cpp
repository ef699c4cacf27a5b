#include "tutti/train/coordinator.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include "coordinator/coordinator_state.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "diag/diag_prober.hpp"
#include "tutti/runtime/log.hpp"
#include "coordinator/metrics_writer.hpp"
#include "coordinator/audit_writer.hpp"
#include "coordinator/coordinator_access.hpp"
#include "coordinator/sender_identity.hpp"
#include "tutti/lifecycle/environment.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

const char* to_string(job_state s) {
  switch (s) {
  case job_state::pending:
    return "pending";
  case job_state::running:
    return "running";
  case job_state::recovering:
    return "recovering";
  case job_state::completed:
    return "completed";
  case job_state::failed:
    return "failed";
  case job_state::stopped:
    return "stopped";
  }
  return "unknown";
}

step_report merge_reports(const std::vector<step_report>& reports) {
  step_report out = reports.front();
  for (const auto& r : reports)
    if (r.rank == 0)
      out = r;
  double compute = 0, a2a = 0, a2a_wait = 0, overlap = 0, ar = 0, other = 0,
         slowest = 0, data_wait = 0, lent = 0;
  int64_t bytes = 0, replica_bytes = 0, replica_step = out.replica_step;
  double replica_stall = 0, replica_copy = 0;
  std::vector<int64_t> by_link;
  for (const auto& r : reports) {
    replica_bytes += r.replica_bytes;
    replica_step = std::min(replica_step, r.replica_step);
    replica_stall = std::max(replica_stall, r.time_replica_s);
    replica_copy = std::max(replica_copy, r.time_replica_copy_s);
    bytes += r.alltoall_bytes;
    by_link.resize(std::max(by_link.size(), r.alltoall_bytes_by_link.size()));
    for (size_t c = 0; c < r.alltoall_bytes_by_link.size(); ++c)
      by_link[c] += r.alltoall_bytes_by_link[c];
    compute += r.time_compute_s;
    a2a += r.time_alltoall_s;
    a2a_wait += r.time_alltoall_wait_s;
    lent += r.time_lent_s;
    overlap += r.time_overlap_s;
    ar += r.time_allreduce_s;
    other += r.time_other_s;
    slowest = std::max(slowest, r.step_time_s);
    data_wait = std::max(data_wait, r.time_data_s);
  }
  const double n = static_cast<double>(reports.size());
  out.time_compute_s = compute / n;
  out.time_alltoall_s = a2a / n;
  out.time_alltoall_wait_s = a2a_wait / n;
  out.time_lent_s = lent / n;
  out.time_overlap_s = overlap / n;
  out.time_allreduce_s = ar / n;
  out.time_other_s = other / n;
  out.step_time_s = slowest;
  // The slowest loader holds every rank back at the step's collectives.
  out.time_data_s = data_wait;
  // Per rank, averaged: routing makes ranks send unevenly.
  out.alltoall_bytes = bytes / static_cast<int64_t>(reports.size());
  // By link class: the step's total over all ranks.
  out.alltoall_bytes_by_link = std::move(by_link);
  // Copies: a recovery loses nothing back to the oldest rank's newest copy.
  out.replica_step = replica_step;
  out.replica_bytes = replica_bytes;
  out.time_replica_s = replica_stall;
  out.time_replica_copy_s = replica_copy;
  return out;
}

// Ends the job: stop the metrics writer, and once it has flushed (its down
// message), tell the listener.
void finish(coordinator_pointer self, job_state outcome, std::string message) {
  auto& st = self->state;
  if (st.ended())
    return;
  // A failed job's alerts stay as they were, for the post-mortem.
  if (outcome != job_state::failed)
    resolve_all_alerts(self, "the job " + std::string(to_string(outcome)));
  st.state = outcome;
  st.failure = std::move(message);
  // Every daemon learns the job is over, so none takes the coordinator's
  // exit for a crash and waits for it to come back.
  for (auto& [n, m] : st.nodes)
    self->send(m.supervisor, job_outcome{outcome != job_state::failed,
                                         st.failure, st.final_eval_loss});
  release_spares(self);
  if (outcome == job_state::failed)
    log_error("coordinator", "job failed: " + st.failure);
  else
    log_info("coordinator", "job " + std::string(to_string(outcome)));
  self->send_exit(st.writer, caf::exit_reason::user_shutdown);
}

static std::string missing_nodes(const coordinator_state& st) {
  std::string out;
  for (int64_t n = 0; n < st.cfg.cluster.nnodes; ++n)
    if (!st.nodes.count(n)) {
      auto a = st.cfg.cluster.node(n);
      out += (out.empty() ? "" : ", ") + std::to_string(n) + " (" + a.host + ":"
             + std::to_string(a.port) + ")";
    }
  return out;
}

void record_event(coordinator_pointer self, const std::string& kind,
                  const std::string& text, double seconds) {
  self->send(self->state.journal, job_event{kind, text, seconds});
}

void start_job(coordinator_pointer self) {
  auto& st = self->state;
  st.state = job_state::running;
  log_info("coordinator", st.resume_step > 0
                            ? "job running, resumed after step "
                                + std::to_string(st.resume_step)
                            : std::string("job running"));
  for (auto& [rank, m] : st.nodes)
    self->send(m.supervisor, epoch_start_on(st, st.resume_step));
}

namespace {

// The first component (build id, a library, a data file) in which a joining
// node's environment differs from the coordinator's process; "" when none
// does or the check is off (diag.environment).
std::string environment_difference(const coordinator_state& st,
                                   const node_registration& reg) {
  if (st.cfg.diag.environment == preflight_check::off || st.environment.empty()
      || reg.environment.empty())
    return "";
  const auto why = lifecycle::environment_difference(
    lifecycle::parse_environment(st.environment), "node 0 (the coordinator's)",
    lifecycle::parse_environment(reg.environment),
    "node " + std::to_string(reg.node_rank));
  return why.empty() ? why
                     : "node " + std::to_string(reg.node_rank) + " (" + reg.host
                         + ") differs in " + why;
}

// The environment table of the joined nodes, for tutti diag.
std::string environment_table(const coordinator_state& st) {
  std::vector<std::pair<std::string, lifecycle::environment>> columns;
  for (const auto& [rank, m] : st.nodes)
    if (!m.info.environment.empty())
      columns.emplace_back("node " + std::to_string(rank),
                           lifecycle::parse_environment(m.info.environment));
  if (columns.empty())
    return "";
  return "environment (diag.environment: "
         + std::string(to_string(st.cfg.diag.environment)) + "):\n"
         + lifecycle::environment_table(columns) + "\n";
}


// The job ends once its outcome is known and no checkpoint is in flight.
void settle(coordinator_pointer self) {
  auto& st = self->state;
  if (!st.outcome || !st.committing.empty())
    return;
  // Ranks checkpoint their last step; wait until it is committed or failed.
  if (st.outcome->first != job_state::failed && st.last_committed < st.last_step
      && !st.failed_steps.count(st.last_step))
    return;
  auto [state, why] = *st.outcome;
  self->send(st.journal, job_final_state{to_string(state), st.last_step});
  finish(self, state, why);
}

void commit_checkpoint(coordinator_pointer self, int64_t step) {
  auto& st = self->state;
  st.committing.insert(step);
  const auto t0 = std::chrono::steady_clock::now();
  self
    ->request(st.journal, std::chrono::seconds(120),
              commit_request{step, st.epoch_world(), st.epoch})
    .then(
      [self, step, t0](int64_t bytes) {
        auto& st = self->state;
        observe_commit(
          self, true,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
        st.committing.erase(step);
        st.last_committed = std::max(st.last_committed, step);
        check_recovery(self);
        log_info("coordinator",
                 "checkpoint step " + std::to_string(step) + " committed ("
                   + std::to_string(bytes) + " bytes, "
                   + std::to_string(std::chrono::duration<double>(
                                      std::chrono::steady_clock::now() - t0)
                                      .count())
                   + " s to commit)");
        settle(self);
        on_commit_for_grow(self, step, true);
      },
      [self, step](caf::error& err) {
        auto& st = self->state;
        observe_commit(self, false, 0);
        st.committing.erase(step);
        st.failed_steps.insert(step);
        check_recovery(self);
        log_error("coordinator",
                  "ALERT critical: checkpoint step " + std::to_string(step)
                    + " failed: " + self->system().render(err)
                    + "; training goes on, step "
                    + std::to_string(st.last_committed) + " stays the latest");
        settle(self);
        on_commit_for_grow(self, step, false);
      });
}

// Commits each step every rank's shard of is on disk; with copies on,
// once every rank has reported it too: a checkpoint the metrics have no
// line for would resume past a gap (a rank holds a copied step's report
// until the copy lands, and may write its shard and die meanwhile). A
// recovery first drops those still waiting.
void commit_saved_steps(coordinator_pointer self) {
  auto& st = self->state;
  // Ranks hold reports only while their copies travel; without copies a
  // rank reports right after its snapshot, and the shards commit at once.
  const bool held_reports = st.cfg.elastic.replica_interval_steps > 0;
  for (auto i = st.saved.begin(); i != st.saved.end();) {
    const auto step = i->first;
    if (static_cast<int64_t>(i->second.size()) != st.epoch_world()
        || (held_reports && step > st.last_step)) {
      ++i;
      continue;
    }
    i = st.saved.erase(i);
    commit_checkpoint(self, step);
  }
}

void start_diag(coordinator_pointer self) {
  auto& st = self->state;
  if (st.diag_running)
    return;
  st.diag_running = true;
  st.diag_rows.clear();
  ++st.diag_round;
  log_info("coordinator", "diag round " + std::to_string(st.diag_round));
  for (auto& [rank, m] : st.nodes)
    self->send(m.supervisor, diag_atom_v, st.diag_round);
}

void on_diag_row(coordinator_pointer self, const diag_row& row) {
  auto& st = self->state;
  st.diag_rows.push_back(row);
  if (static_cast<int64_t>(st.diag_rows.size()) < st.cfg.cluster.nnodes)
    return;
  st.diag_running = false;
  auto report = make_diag_report(st.cfg, st.diag_rows);
  report.text = environment_table(st) + report.text;
  log_info("coordinator", "diag:\n" + report.text);
  for (auto& p : st.diag_waiting)
    p.deliver(report);
  st.diag_waiting.clear();
  if (!st.diag_preflight)
    return;
  st.diag_preflight = false;
  std::string named;
  for (auto n : report.stragglers)
    named += (named.empty() ? "" : ", ") + std::to_string(n);
  if (!report.ok) {
    finish(self, job_state::failed, "pre-flight check failed:\n" + report.text);
  } else if (!named.empty()
             && st.cfg.diag.on_start == preflight_check::refuse) {
    finish(self, job_state::failed,
           "pre-flight check: straggler node " + named
             + "; not starting (diag.on_start: refuse)\n" + report.text);
  } else {
    if (!named.empty())
      log_warn("coordinator", "pre-flight check: straggler node " + named
                                + "; starting anyway (diag.on_start: warn)");
    start_job(self);
  }
}

caf::error on_register(coordinator_pointer self, const node_registration& reg,
                       const caf::actor& handle) {
  auto& st = self->state;
  const auto& cl = st.cfg.cluster;
  auto refuse = [&](const std::string& why) {
    log_error("coordinator", "refused node " + std::to_string(reg.node_rank)
                               + " from " + reg.host + ": " + why);
    return caf::make_error(errc::config_refused, why);
  };
  if (reg.config_fingerprint == st.fingerprint && st.state == job_state::running
      && st.nodes.count(reg.node_rank)) {
    // A restarted daemon, before its old incarnation was missed: the old
    // one is gone for good, and the job recovers with the new one.
    on_node_lost(self, reg.node_rank, "replaced by a restarted daemon");
  }
  if (st.nodes.count(reg.node_rank))
    return refuse("node rank " + std::to_string(reg.node_rank)
                  + " has already joined");
  // A node may join at the start, come back while the job recovers, or
  // while a smaller layout trains without it (elastic training).
  const bool growing = st.state == job_state::running && !st.members.empty();
  if (st.state != job_state::pending && st.state != job_state::recovering
      && !growing)
    return refuse("the job is already " + std::string(to_string(st.state)));
  if (reg.node_rank < 0 || reg.node_rank >= cl.nnodes)
    return refuse("node rank " + std::to_string(reg.node_rank)
                  + " is outside 0.." + std::to_string(cl.nnodes - 1));
  if (reg.config_fingerprint != st.fingerprint)
    return refuse("config differs from the coordinator's: "
                  + first_difference(reg.config_fingerprint, st.fingerprint));
  if (auto why = environment_difference(st, reg); !why.empty()) {
    if (st.cfg.diag.environment == preflight_check::refuse)
      return refuse(why + " (diag.environment: refuse)");
    log_warn("coordinator", why + "; joining anyway (diag.environment: warn)");
    record_event(self, "environment_differs", why, -1);
  }
  auto supervisor = caf::actor_cast<node_supervisor_actor>(handle);
  st.nodes[reg.node_rank] = {reg, supervisor, coordinator_clock::now()};
  self->monitor(supervisor);
  log_info("coordinator", "node " + std::to_string(reg.node_rank) + " joined ("
                            + reg.host + ", rack '" + reg.rack + "', "
                            + std::to_string(reg.devices) + " ranks)");
  st.draining.erase(reg.node_rank);
  st.left_rack.erase(reg.node_rank);
  st.assigned.erase(reg.node_rank);
  if (growing) {
    begin_grow(self, reg.node_rank);
    return caf::error{};
  }
  if (st.state == job_state::recovering) {
    // It runs no ranks of the old epoch.
    record_event(self, "node_joined", st.node_name(reg.node_rank) + " is back",
                 0);
    st.aborted_nodes.insert(reg.node_rank);
    check_recovery(self);
    return caf::error{};
  }
  if (static_cast<int64_t>(st.nodes.size()) == cl.nnodes) {
    log_info("coordinator",
             "all " + std::to_string(cl.nnodes) + " nodes joined");
    if (st.cfg.diag.on_start != preflight_check::off && cl.nnodes > 1) {
      st.diag_preflight = true;
      start_diag(self);
    } else {
      start_job(self);
    }
  }
  return caf::error{};
}

// With TLS, a daemon joins as the node rank its certificate names, and
// nothing else: the registration's claim is checked against the
// certificate that opened its connection.
caf::result<caf::ok_atom> register_certified(coordinator_pointer self,
                                             const node_registration& reg,
                                             const caf::actor& handle) {
  auto reply = [](caf::error err) -> caf::result<caf::ok_atom> {
    if (err)
      return err;
    return caf::ok_atom_v;
  };
  const auto sender = self->current_sender();
  if (!self->state.cfg.security.tls_on() || !sender)
    return reply(on_register(self, reg, handle));
  auto promise = self->make_response_promise<caf::ok_atom>();
  identify_sender(
    self, sender->node(),
    [self, reg, handle, promise](sender_identity from) mutable {
      std::string why;
      if (!from.local) {
        if (!from.certified)
          why = "no certificate is known for its connection (" + from.address
                + ")";
        else if (from.certified->kind != security::identity_kind::node
                 || from.certified->node_rank != reg.node_rank)
          why = "its certificate names " + from.certified->text()
                + ", not node " + std::to_string(reg.node_rank);
      }
      if (!why.empty()) {
        log_error("coordinator", "refused node " + std::to_string(reg.node_rank)
                                   + " from " + reg.host + ": " + why);
        promise.deliver(caf::make_error(errc::config_refused, why));
        return;
      }
      if (auto err = on_register(self, reg, handle))
        promise.deliver(std::move(err));
      else
        promise.deliver(caf::ok_atom_v);
    });
  return promise;
}

void on_down(coordinator_pointer self, caf::down_msg& dm) {
  auto& st = self->state;
  if (dm.source == st.writer.address()) {
    if (st.state == job_state::pending || st.state == job_state::running) {
      st.state = job_state::failed;
      st.failure = "metrics writer stopped: "
                   + self->system().render(dm.reason);
    }
    caf::anon_send(st.listener, job_outcome{st.state != job_state::failed,
                                            st.failure, st.final_eval_loss});
    self->quit();
    return;
  }
  if (on_spare_down(self, dm.source))
    return;
  for (auto& [rank, m] : st.nodes)
    if (dm.source == m.supervisor.address()) {
      if (!dm.reason || dm.reason == caf::exit_reason::normal) {
        // Its ranks are done and its writer has flushed; or it was told to
        // stop while no ranks ran (pending, recovering): the job stops.
        log_info("coordinator", "node " + std::to_string(rank) + " finished");
        st.nodes.erase(rank);
        if (st.state == job_state::recovering || st.state == job_state::pending)
          finish(self, job_state::stopped,
                 "stopped while " + std::string(to_string(st.state)));
        return;
      }
      on_node_lost(self, rank,
                   "its daemon's connection ended ("
                     + self->system().render(dm.reason) + ")");
      return;
    }
}

coordinator_actor::behavior_type coordinator(coordinator_pointer self,
                                             coordinator_args args) {
  auto& st = self->state;
  st.cfg = std::move(args.cfg);
  st.listener = std::move(args.listener);
  st.board = std::move(args.board);
  st.writer = spawn_metrics_writer(self->system(), st.cfg, args.quiet,
                                   args.resume_step,
                                   caf::actor_cast<caf::actor>(self));
  self->monitor(st.writer);
  st.fingerprint = fingerprint_text(st.cfg);
  st.environment = std::move(args.environment);
  st.journal = std::move(args.journal);
  st.resume_step = args.resume_step;
  st.last_step = args.resume_step;
  st.last_committed = args.resume_step;
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  if (st.cfg.security.tls_on()) {
    // tuttid checked the file at start; a later bad edit keeps the last
    // good policy.
    if (auto policy = security::access_policy::open(st.cfg.security.policy))
      st.policy = *policy;
    else
      log_error("coordinator", "security.policy: " + policy.message()
                                 + "; every operator command is refused");
  }
  st.auditor = spawn_audit_writer(self->system(),
                                  st.cfg.run.dir + "/audit.jsonl", st.journal);
  self->attach_functor([auditor = st.auditor] {
    caf::anon_send_exit(auditor, caf::exit_reason::user_shutdown);
  });
  self->delayed_send(self, std::chrono::seconds(st.cfg.cluster.join_timeout_s),
                     join_deadline_atom_v);
  self->send(self, tick_atom_v);
  log_info("coordinator",
           "waiting for " + std::to_string(st.cfg.cluster.nnodes) + " nodes");
  return {
    [self](register_atom, const node_registration& reg,
           const caf::actor& handle) -> caf::result<caf::ok_atom> {
      return register_certified(self, reg, handle);
    },
    [self](spare_atom, const node_registration& reg,
           const caf::actor& handle) -> caf::result<caf::ok_atom> {
      return on_spare(self, reg, handle);
    },
    [self](diag_atom) -> caf::result<diag_report> {
      auto& st = self->state;
      if (static_cast<int64_t>(st.nodes.size()) < st.cfg.cluster.nnodes)
        return caf::make_error(errc::rendezvous_failed,
                               "not all nodes have joined: missing node "
                                 + missing_nodes(st));
      auto promise = self->make_response_promise<diag_report>();
      st.diag_waiting.push_back(promise);
      start_diag(self);
      return promise;
    },
    [self](const diag_row& row) { on_diag_row(self, row); },
    [self](join_deadline_atom) {
      auto& st = self->state;
      if (st.state == job_state::pending)
        finish(self, job_state::failed,
               "nodes did not join within "
                 + std::to_string(st.cfg.cluster.join_timeout_s)
                 + " s (cluster_config.join_timeout_s): missing node "
                 + missing_nodes(st));
    },
    store_set_handler(self),
    store_get_handler(self),
    store_wait_handler(self),
    [self](const step_report& r) {
      auto& st = self->state;
      if (r.epoch != st.epoch || st.state != job_state::running)
        return; // a rank of an aborted epoch
      auto& reports = st.steps[r.step];
      reports.push_back(r);
      if (static_cast<int64_t>(reports.size()) == st.epoch_world()) {
        auto merged = merge_reports(reports);
        if (!merged.routing_window.empty())
          observe_routing(self, merged.routing_window);
        if (!merged.routing_window.empty() && st.journal)
          self->send(st.journal, routing_window_atom_v, r.step,
                     std::move(merged.routing_window));
        merged.routing_window.clear();
        watch_stragglers(self, reports);
        st.steps.erase(r.step);
        st.last_step = std::max(st.last_step, r.step);
        st.last_loss = merged.loss;
        observe_step(self, merged);
        if (st.awaiting_first_step) {
          st.awaiting_first_step = false;
          resolve_alert(self, "job_interrupted");
          auto took = std::chrono::duration<double>(coordinator_clock::now()
                                                    - st.recovery_began)
                        .count();
          auto text = "training resumed: step " + std::to_string(r.step)
                      + " done " + std::to_string(took)
                      + " s after the failure";
          log_info("coordinator", text);
          record_event(self, "resumed", text, took);
        }
        self->send(st.writer, std::move(merged));
        commit_saved_steps(self);
        maybe_regroup(self);
      }
    },
    [self](const rank_done& d) {
      auto& st = self->state;
      st.done.insert(d.rank);
      st.last_step = std::max(st.last_step, d.last_step);
      if (d.rank == 0)
        st.final_eval_loss = d.final_eval_loss;
      if (static_cast<int64_t>(st.done.size()) == st.epoch_world()) {
        if (st.last_step < st.cfg.train.steps)
          st.outcome = {job_state::stopped,
                        "stopped at step " + std::to_string(st.last_step)
                          + " of " + std::to_string(st.cfg.train.steps)};
        else
          st.outcome = {job_state::completed, ""};
        settle(self);
      }
    },
    [self](const shard_saved& s) {
      auto& st = self->state;
      if (on_replica_saved(self, s))
        return; // written from a copy for a recovery
      // A shard of an aborted epoch's snapshot: its MANIFEST would name
      // another epoch than the shards of this one.
      if (st.failed_steps.count(s.step) || s.epoch != st.epoch)
        return;
      st.saved[s.step].insert(s.rank);
      commit_saved_steps(self);
    },
    [self](const shard_failed& f) {
      auto& st = self->state;
      if (on_replica_failed(self, f))
        return;
      if (f.epoch != st.epoch)
        return; // an aborted epoch's write: the step is taken again
      st.saved.erase(f.step);
      if (!st.failed_steps.insert(f.step).second)
        return; // already reported for another rank
      observe_commit(self, false, 0);
      auto text = "checkpoint step " + std::to_string(f.step) + ", rank "
                  + std::to_string(f.rank) + ": " + f.reason;
      log_error("coordinator",
                "ALERT critical: " + text + "; training goes on, step "
                  + std::to_string(st.last_committed) + " stays the latest");
      self->send(st.journal, job_event{"checkpoint_failed", text, -1.0});
      settle(self);
    },
    [self](const rank_failed& f) {
      auto& st = self->state;
      if (f.epoch != st.epoch)
        return; // the failure of an epoch already given up
      begin_recovery(self, f.rank >= 0 ? "rank " + std::to_string(f.rank) + ": "
                                           + f.reason
                                       : f.reason);
    },
    [self](escalate_atom, const std::string& why) {
      begin_recovery(self, why);
    },
    [self](const node_heartbeat& beat) -> caf::result<int64_t> {
      auto& st = self->state;
      auto i = st.nodes.find(beat.node);
      if (i == st.nodes.end())
        return caf::make_error(errc::config_refused,
                               "node " + std::to_string(beat.node)
                                 + " is not a member (dropped)");
      i->second.last_heartbeat = coordinator_clock::now();
      i->second.resident_bytes = beat.resident_bytes;
      return st.epoch;
    },
    [self](shell_atom, const std::string& command,
           const std::vector<std::string>& args) {
      return guarded_shell_command(self, command, args);
    },
    [self](const alert_report& a) { report_condition(self, a); },
    [self](tick_atom) {
      auto& st = self->state;
      if (st.ended())
        return;
      check_heartbeats(self);
      self->delayed_send(
        self, std::chrono::milliseconds(st.cfg.recovery.heartbeat_interval_ms),
        tick_atom_v);
    },
    [self](const node_aborted& a) { on_node_aborted(self, a.node, a.epoch); },
    [self](const job_event& e) {
      auto& st = self->state;
      if (e.kind == "restart") {
        ++st.restarts;
        observe_restart(self, e.text);
      }
      record_event(self, e.kind, e.text, e.seconds);
    },
    [self](chaos_atom, const chaos_request& req) {
      return guarded_chaos(self, req);
    },
    [self](status_atom) { return guarded_status(self); },
  };
}

} // namespace

coordinator_actor spawn_coordinator(caf::actor_system& sys,
                                    coordinator_args args) {
  return sys.spawn(coordinator, std::move(args));
}

} // namespace tutti
