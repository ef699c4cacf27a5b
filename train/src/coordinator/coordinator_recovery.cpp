// The coordinator's failure handling: a failed rank, an
// escalated supervisor, a lost node or a silent one makes it pause the job,
// have every node abort its ranks' communicators at once, wait (up to
// recovery.max_wait_s, then paused until it returns) for every node to be
// back, and start a new membership epoch from the newest committed
// checkpoint (docs/architecture.md, "Failures and recovery").

#include <caf/send.hpp>

#include <algorithm>

#include "coordinator/coordinator_state.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

namespace {

// Recoveries in a row that got no step past the checkpoint: the failure is
// not transient, and the job fails instead of looping.
constexpr int64_t max_fruitless_recoveries = 3;

} // namespace

std::string coordinator_state::node_name(int64_t node) const {
  auto a = cfg.cluster.node(node);
  return "node " + std::to_string(node) + " (" + a.host + ":"
         + std::to_string(a.port) + ")";
}

void restart_from_checkpoint(coordinator_pointer self) {
  auto& st = self->state;
  const auto from = st.last_committed;
  const auto again = std::max<int64_t>(0, st.last_step - from);
  // Keys of the old epoch's rendezvous are never read again; its waiters
  // (aborted ranks still connecting) get an error instead of a timeout.
  st.store.clear(
    caf::make_error(errc::rendezvous_failed, "the epoch was aborted"));
  st.steps.clear();
  st.saved.clear();
  st.done.clear();
  st.slow_streak.clear();
  st.fast_streak.clear();
  st.steps_this_epoch = 0;
  st.failed_steps.erase(st.failed_steps.upper_bound(from),
                        st.failed_steps.end());
  st.last_step = from;
  st.resume_step = from;
  self->send(st.writer, rewind_atom_v, from);
  st.state = job_state::running;
  st.paused = false;
  st.pause_reason.clear();
  st.user_paused = false; // the new epoch's ranks start unpaused
  st.awaiting_first_step = true;
  st.regrouping = false;
  st.grow_requested_at = -1;
  st.grow_checkpoint = {0, false};
  const double took = seconds_since(st.recovery_began);
  auto text = "recovered: epoch " + std::to_string(st.epoch)
              + " starts from the checkpoint of step " + std::to_string(from)
              + " after " + std::to_string(took) + " s (" + st.recovery_cause
              + "); " + std::to_string(again) + " step"
              + (again == 1 ? "" : "s") + " to train again"
              + (st.members.empty() ? "" : "; " + st.layout_summary);
  log_warn("coordinator", text);
  record_event(self, "recovery", text, took);
  for (auto& [rank, m] : st.nodes)
    self->send(m.supervisor, epoch_start_on(st, from));
}

void begin_recovery(coordinator_pointer self, const std::string& why) {
  auto& st = self->state;
  if (st.state == job_state::recovering) {
    log_warn("coordinator", "during recovery: " + why);
    return;
  }
  if (st.state != job_state::running || st.outcome)
    return;
  if (!st.done.empty()) {
    // Some ranks finished the job (their nodes may have left): a new epoch
    // could not gather everyone. Fail clearly rather than wait forever.
    finish(self, job_state::failed,
           why + " (after ranks had finished the job)");
    return;
  }
  if (st.last_step <= st.resume_step && st.recoveries > 0)
    ++st.fruitless_recoveries;
  else
    st.fruitless_recoveries = 0;
  if (st.fruitless_recoveries >= max_fruitless_recoveries) {
    finish(self, job_state::failed,
           why + " (" + std::to_string(st.fruitless_recoveries)
             + " recoveries in a row made no progress past step "
             + std::to_string(st.resume_step) + ")");
    return;
  }
  st.state = job_state::recovering;
  ++st.epoch;
  ++st.recoveries;
  st.recovery_began = coordinator_clock::now();
  st.recovery_cause = why;
  st.aborted_nodes.clear();
  st.replicas.phase = replica_resume::idle;
  log_error("coordinator", "ALERT critical: job interrupted: " + why
                             + "; recovering (epoch " + std::to_string(st.epoch)
                             + ")");
  record_event(self, "failure", why, 0);
  fire_alert(self, "job_interrupted", "critical", why);
  for (auto& [node, m] : st.nodes)
    self->send(m.supervisor, abort_atom_v, st.epoch);
  check_recovery(self);
}

void on_node_aborted(coordinator_pointer self, int64_t node, int64_t epoch) {
  auto& st = self->state;
  if (epoch != st.epoch || st.state != job_state::recovering)
    return;
  st.aborted_nodes.insert(node);
  check_recovery(self);
}

// Restarts once every node is back and has ended its old ranks, and no
// checkpoint commit is under way (it may become the one to resume from).
void check_recovery(coordinator_pointer self) {
  auto& st = self->state;
  if (st.state != job_state::recovering)
    return;
  std::string missing;
  for (int64_t n = 0; n < st.cfg.cluster.nnodes; ++n)
    if (!st.nodes.count(n))
      missing += (missing.empty() ? "" : ", ") + st.node_name(n);
  if (!missing.empty()) {
    if (try_shrink(self, missing))
      return;
    if (!st.paused
        && seconds_since(st.recovery_began) > st.cfg.recovery.max_wait_s) {
      st.paused = true;
      auto text = "job paused: waiting for " + missing
                  + " to come back (start its tuttid); it resumes by itself "
                    "when it does";
      st.pause_reason = text;
      log_error("coordinator", "ALERT critical: " + text);
      record_event(self, "pause", text, seconds_since(st.recovery_began));
    }
    return;
  }
  for (const auto& [node, m] : st.nodes)
    if (!st.aborted_nodes.count(node))
      return;
  if (!st.committing.empty() || resume_from_replicas(self))
    return;
  if (!st.members.empty()) {
    st.members.clear(); // every node is back: the full layout again
    st.layout_summary.clear();
    if (!st.regrouping) // a regroup has recorded its own grow event
      record_event(self, "grow", "every node is back: the job's full layout",
                   seconds_since(st.recovery_began));
  }
  restart_from_checkpoint(self);
}

void on_node_lost(coordinator_pointer self, int64_t node,
                  const std::string& why) {
  auto& st = self->state;
  auto i = st.nodes.find(node);
  if (i == st.nodes.end())
    return;
  self->demonitor(i->second.supervisor.address());
  st.left_rack[node] = i->second.info.rack; // for a spare of the same rack
  st.nodes.erase(i);
  auto text = st.node_name(node) + " lost: " + why;
  if (st.state == job_state::running) {
    record_event(self, "node_lost", text, 0);
    begin_recovery(self, text);
  } else if (st.state == job_state::recovering) {
    log_warn("coordinator", text);
    record_event(self, "node_lost", text, 0);
    check_recovery(self);
  } else {
    log_warn("coordinator", text);
  }
  reschedule(self);
}

void check_heartbeats(coordinator_pointer self) {
  auto& st = self->state;
  const auto limit = std::chrono::milliseconds(
    st.cfg.recovery.heartbeat_timeout_ms);
  const auto now = coordinator_clock::now();
  std::vector<std::pair<int64_t, double>> silent;
  for (const auto& [node, m] : st.nodes)
    if (now - m.last_heartbeat > limit)
      silent.emplace_back(node, seconds_since(m.last_heartbeat));
  for (auto [node, age] : silent)
    on_node_lost(self, node,
                 "no heartbeat for " + std::to_string(age)
                   + " s (recovery.heartbeat_timeout_ms "
                   + std::to_string(st.cfg.recovery.heartbeat_timeout_ms)
                   + ")");
  check_recovery(self);
}

// A rank whose busy time (compute and waits outside collectives) is over
// straggler_factor times the median for straggler_steps steps in a row.
// It is alerted once, and again only after as many steps in a row at the
// pace of the others: one step that happens to be quick (a loaded host
// slows every rank alike) does not end it and start a new alert. The
// first steps of an epoch are not judged: first touches of memory and
// connections make one rank slower there than it will be.
void watch_stragglers(coordinator_pointer self,
                      const std::vector<step_report>& reports) {
  auto& st = self->state;
  constexpr int64_t warm_up_steps = 5;
  if (reports.size() < 2 || ++st.steps_this_epoch <= warm_up_steps)
    return;
  std::vector<double> busy;
  for (const auto& r : reports)
    busy.push_back(r.time_compute_s + r.time_other_s);
  auto sorted = busy;
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2,
                   sorted.end());
  const double median = sorted[sorted.size() / 2];
  const auto& rc = st.cfg.recovery;
  for (size_t i = 0; i < reports.size(); ++i) {
    const auto rank = reports[i].rank;
    // Below a millisecond the differences are noise.
    const bool slow = busy[i] > rc.straggler_factor * median
                      && busy[i] - median > 1e-3;
    auto& streak = st.slow_streak[rank];
    auto& fast = st.fast_streak[rank];
    streak = slow ? streak + 1 : 0;
    fast = slow ? 0 : fast + 1;
    if (!slow) {
      if (fast >= rc.straggler_steps)
        st.stragglers.erase(rank);
      continue;
    }
    if (streak < rc.straggler_steps || st.stragglers.count(rank))
      continue;
    st.stragglers.insert(rank);
    const auto node = st.node_of_rank(rank);
    auto text = "straggler: rank " + std::to_string(rank) + " on "
                + st.node_name(node) + " took " + std::to_string(busy[i])
                + " s per step outside collectives " + "against a median of "
                + std::to_string(median) + " s, " + std::to_string(streak)
                + " steps in a row (step " + std::to_string(reports[i].step)
                + ")";
    log_warn("coordinator", "ALERT important: " + text);
    record_event(self, "straggler", text, busy[i]);
  }
}

caf::result<std::string> route_chaos(coordinator_pointer self,
                                     const chaos_request& req) {
  auto& st = self->state;
  int64_t node = req.node;
  if (node < 0 && req.rank >= 0 && req.rank < st.epoch_world())
    node = st.node_of_rank(req.rank);
  auto i = st.nodes.find(node);
  if (i == st.nodes.end())
    return caf::make_error(
      errc::config_refused,
      node < 0
        ? std::string("chaos: name a rank "
                      "(0.."
                      + std::to_string(st.epoch_world() - 1) + ") or a node")
        : "chaos: node " + std::to_string(node) + " is not connected");
  record_event(self, "chaos",
               "injected " + req.fault + " (rank " + std::to_string(req.rank)
                 + ", node " + std::to_string(node) + ")",
               0);
  auto promise = self->make_response_promise<std::string>();
  self
    ->request(i->second.supervisor, std::chrono::seconds(10), chaos_atom_v, req)
    .then([promise](std::string& done) mutable { promise.deliver(done); },
          [promise, f = req.fault](caf::error& err) mutable {
            // A killed daemon cannot answer; that is the point.
            if (f == "kill_daemon")
              promise.deliver(std::string("kill_daemon sent"));
            else
              promise.deliver(err);
          });
  return promise;
}

job_status describe_job(const coordinator_state& st) {
  job_status s;
  s.state = st.paused || st.user_paused ? "paused" : to_string(st.state);
  s.step = st.last_step;
  s.steps = st.cfg.train.steps;
  s.epoch = st.epoch;
  s.last_checkpoint = st.last_committed;
  s.loss = st.last_loss;
  s.recoveries = st.recoveries;
  s.restarts = st.restarts;
  for (const auto& [node, m] : st.nodes)
    s.nodes.push_back(node);
  s.message = st.paused && !st.pause_reason.empty() ? st.pause_reason
              : st.state == job_state::recovering   ? st.recovery_cause
              : st.user_paused ? "paused by the shell; resume to go on"
              : !st.members.empty() && st.failure.empty()
                ? "training without lost nodes: " + st.layout_summary
                : st.failure;
  for (const auto& [name, a] : st.seen.alerts)
    s.alerts.push_back(a.level + " " + name + (a.flapping ? " (flapping)" : "")
                       + ": " + a.text);
  return s;
}

} // namespace tutti
