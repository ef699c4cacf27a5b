#pragma once
// The coordinator's state and the parts of its behaviour split across
// coordinator.cpp (membership, store, steps, checkpoints) and
// coordinator_recovery.cpp (failures, heartbeats, recovery, stragglers,
// faults, status).

#include <caf/stateful_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <deque>

#include "coordinator/sender_identity.hpp"
#include "tutti/runtime/key_store.hpp"
#include "tutti/train/coordinator.hpp"
#include "tutti/runtime/metrics_board.hpp"
#include "tutti/observability/alert_state.hpp"
#include "tutti/placement/routing_stats.hpp"
#include "tutti/security/access_policy.hpp"

namespace tutti {

using coordinator_clock = std::chrono::steady_clock;

inline double seconds_since(coordinator_clock::time_point t0) {
  return std::chrono::duration<double>(coordinator_clock::now() - t0).count();
}

struct member {
  node_registration info;
  node_supervisor_actor supervisor;
  coordinator_clock::time_point last_heartbeat;
  int64_t resident_bytes = 0; // its daemon's, from the heartbeat
};

// A daemon waiting to take the place of a node that leaves.
struct spare_daemon {
  node_registration info; // node_rank -1; its rack
  caf::actor handle;      // told assign_atom and the node rank
};

// A rule that fires: since when, and what it said.
struct firing_alert {
  std::string level; // critical | important | normal
  std::string text;
  int64_t since_step = 0;
  bool flapping = false; // fired often: held until clear for a window
};

// A condition a node's actors report (alert_report: checkpoint_disk,
// slow_log_write), judged at each step like the coordinator's own rules.
struct reported_condition {
  std::string level;
  std::string text;
  bool raised = false;
};

// What the coordinator has seen of the job, for status, the shell's
// experts and metrics commands, /metrics and the alert rules.
struct job_observations {
  step_report last; // merged, of the last step
  bool have_last = false;
  std::vector<double> expert_sum; // tokens per [layer][expert], summed
  int64_t expert_steps = 0;
  int64_t dropped_total = 0;
  int64_t steps_seen = 0;
  double elapsed_s = 0;          // sum of step times seen
  double last_commit_s = 0;      // how long the last checkpoint commit took
  double last_commit_unix_s = 0; // when it succeeded
  int64_t checkpoint_failures_in_row = 0;
  std::map<std::string, int64_t> restarts_by_kind;
  std::deque<double> recent_losses; // for the spike rule
  std::vector<double> comm_samples; // all-to-all seconds, first steps
  double comm_baseline_s = 0;
  // All-to-all bytes by link class (same_rank, intra_node, intra_rack,
  // inter_rack), every rank's, summed over the steps seen.
  std::vector<double> alltoall_bytes_total;
  std::map<std::string, firing_alert> alerts; // by rule name
  // Each per-step rule's hold, hysteresis and flapping, by rule name.
  std::map<std::string, observability::alert_state> rules;
  std::map<std::string, reported_condition> reported; // by rule name
  double last_eval_loss = 0;                  // the last held-out loss
  bool have_eval = false;
};

// A recovery resuming from the ranks' in-memory copies instead of the
// newest checkpoint (elastic.replica_interval_steps): asking the nodes
// what they hold, having the newest complete step written, committing it.
struct replica_resume {
  enum phase_kind { idle, asking, writing, done } phase = idle;
  int64_t answers_due = 0;
  std::vector<std::pair<int64_t, replica_held>> held; // (node, copy)
  int64_t epoch = 0, step = 0, world = 0;
  std::set<int32_t> saved;
  coordinator_clock::time_point began;
};

struct coordinator_state {
  coordinator_state() = default; // not an aggregate (CAF would pass `this`)
  static inline const char* name = "coordinator";

  job_config cfg;
  std::string fingerprint;
  std::vector<std::string> environment; // this process's (coordinator_args)
  std::map<int64_t, member> nodes;      // by node rank
  int64_t last_step = 0;
  journal_actor journal;
  int64_t resume_step = 0;
  // Checkpoints: ranks whose shard is on disk, per step; steps whose commit
  // is under way; what ended the job, held until those are settled.
  std::map<int64_t, std::set<int32_t>> saved;
  std::set<int64_t> committing;
  std::set<int64_t> failed_steps;
  int64_t last_committed = 0;
  std::optional<std::pair<job_state, std::string>> outcome;
  // tutti diag rounds: rows collected, who is waiting, and whether this
  // round is the pre-flight check that gates the job's start.
  int64_t diag_round = 0;
  bool diag_running = false, diag_preflight = false;
  std::vector<diag_row> diag_rows;
  std::vector<caf::typed_response_promise<diag_report>> diag_waiting;
  caf::actor listener;
  job_state state = job_state::pending;
  metrics_writer_actor writer;
  key_store store; // the ranks' rendezvous
  std::map<int64_t, std::vector<step_report>> steps;
  std::set<int32_t> done;
  double final_eval_loss = std::numeric_limits<double>::quiet_NaN();
  double last_loss = 0;
  std::string failure;

  // Recovery: the membership epoch (+1 per recovery), the nodes that have
  // ended the old epoch's ranks, when it began, whether the job waits past
  // recovery.max_wait_s for a node (paused), and recoveries in a row that
  // made no progress (the job fails after a few).
  int64_t epoch = 0;
  std::set<int64_t> aborted_nodes;
  coordinator_clock::time_point recovery_began;
  std::string recovery_cause;
  bool paused = false;
  std::string pause_reason; // why, while paused (status says it)
  bool awaiting_first_step = false; // of the new epoch: "training resumed"
  int64_t recoveries = 0, restarts = 0;
  int64_t fruitless_recoveries = 0;
  // Stragglers: steps in a row each rank was slow, and not; ranks alerted.
  std::map<int32_t, int64_t> slow_streak, fast_streak;
  int64_t steps_this_epoch = 0; // the first few are not judged
  std::set<int32_t> stragglers;
  job_observations seen;
  std::shared_ptr<metrics_board> board; // for /metrics; may be null
  std::set<int64_t> draining;           // nodes told to leave
  // Rescheduling (coordinator_spares.cpp): spares waiting; the rack of
  // each node that left, until a daemon takes its place; nodes a spare was
  // assigned to; the placement planned again when a spare of another rack
  // took a node ([layer][slot] -> expert; empty: moe_config.placement's);
  // the routing statistics seen, which that plan is made from.
  std::vector<spare_daemon> spares;
  std::map<int64_t, std::string> left_rack;
  std::set<int64_t> assigned;
  std::vector<int32_t> expert_at;
  placement::routing_stats routing_seen;
  bool user_paused = false;             // by the shell's pause
  // Elastic training (coordinator_elastic.cpp): the nodes that train in
  // this epoch (empty: all of the config's); the step whose checkpoint the
  // job regroups at once returned nodes can be taken back (-1: none asked).
  std::vector<int64_t> members;
  std::string layout_summary; // of a smaller layout, for status
  int64_t grow_requested_at = -1;
  std::pair<int64_t, bool> grow_checkpoint{0, false}; // (step, committed)
  bool regrouping = false; // this recovery takes nodes back: no wait
  replica_resume replicas;
  // Access: remote senders by node (their certificates), the policy, the
  // audit log's writer.
  std::map<caf::node_id, sender_identity> senders;
  std::shared_ptr<security::access_policy> policy;
  caf::actor auditor;

  bool ended() const {
    return state == job_state::completed || state == job_state::failed
           || state == job_state::stopped;
  }
  std::string node_name(int64_t node) const;
  // Ranks of this epoch's layout, and the node that runs a rank of it.
  int64_t epoch_world() const;
  int64_t node_of_rank(int64_t rank) const;
  // The node's index in this epoch's layout; -1: it trains in none.
  int64_t epoch_index(int64_t node) const;
};

using coordinator_pointer =
  coordinator_actor::stateful_pointer<coordinator_state>;

// coordinator.cpp
void finish(coordinator_pointer self, job_state outcome, std::string message);
void start_job(coordinator_pointer self);
void record_event(coordinator_pointer self, const std::string& kind,
                  const std::string& text, double seconds);

// coordinator_recovery.cpp
void begin_recovery(coordinator_pointer self, const std::string& why);
void check_recovery(coordinator_pointer self);
// The next epoch, on st.members, from the newest committed checkpoint.
void restart_from_checkpoint(coordinator_pointer self);
void on_node_aborted(coordinator_pointer self, int64_t node, int64_t epoch);
void on_node_lost(coordinator_pointer self, int64_t node,
                  const std::string& why);
void check_heartbeats(coordinator_pointer self);
void watch_stragglers(coordinator_pointer self,
                      const std::vector<step_report>& reports);
caf::result<std::string> route_chaos(coordinator_pointer self,
                                     const chaos_request& req);
job_status describe_job(const coordinator_state& st);

// coordinator_elastic.cpp
// While recovering with nodes missing: past elastic.shrink_after_s, the
// nodes here go on in a smaller layout (true), or the job pauses naming
// why not. False when elastic training is off or the wait is not over.
bool try_shrink(coordinator_pointer self, const std::string& missing);
// A lost node is back while a smaller layout trains: the ranks checkpoint
// and pause at the next step, and the job regroups to the larger layout
// from that checkpoint (nothing computed again).
void begin_grow(coordinator_pointer self, int64_t node);
// The checkpoint of `step` committed (or failed: the ranks wait paused,
// so the job regroups from the one before).
void on_commit_for_grow(coordinator_pointer self, int64_t step,
                        bool committed);
// Once that step's reports are in too: the regroup (after each step).
void maybe_regroup(coordinator_pointer self);
// Before a recovery restarts: the newest step whose copies survive,
// written and committed as a checkpoint when it is newer than the last
// one. True while that is under way (check_recovery runs again after).
bool resume_from_replicas(coordinator_pointer self);
// A shard written from a copy (true: taken), or its failure.
bool on_replica_saved(coordinator_pointer self, const shard_saved& s);
bool on_replica_failed(coordinator_pointer self, const shard_failed& f);
// The epoch_start of a new epoch from checkpoint `from` on `members`.
epoch_start epoch_start_on(const coordinator_state& st, int64_t from);

// coordinator_observe.cpp
void observe_step(coordinator_pointer self, const step_report& merged);
void observe_commit(coordinator_pointer self, bool ok, double seconds);
void observe_restart(coordinator_pointer self, const std::string& text);
// Fire and resolve at once: alerts an event decides (job_interrupted,
// checkpoint_failures). `flapping`, when not empty, says why the rule is
// held firing.
void fire_alert(coordinator_pointer self, const std::string& name,
                const std::string& level, const std::string& text,
                const std::string& flapping = "");
void resolve_alert(coordinator_pointer self, const std::string& name,
                   const std::string& why = "");
// At the job's end: every episode still firing ends with it.
void resolve_all_alerts(coordinator_pointer self, const std::string& why);
// A node's alert_report: the condition, judged at the next steps.
void report_condition(coordinator_pointer self, const alert_report& report);
void publish_metrics(coordinator_pointer self);
std::string render_metrics(const coordinator_state& st);
// Of a step's all-to-all bytes that went over a link (same_rank, the
// ranks' copies to themselves, left out), the share that crossed racks; 0
// without traffic. by_link as step_report.alltoall_bytes_by_link.
double cross_rack_share(const std::vector<int64_t>& by_link);

// coordinator_spares.cpp
caf::result<caf::ok_atom> on_spare(coordinator_pointer self,
                                   const node_registration& reg,
                                   const caf::actor& handle);
void reschedule(coordinator_pointer self);
bool on_spare_down(coordinator_pointer self, const caf::actor_addr& source);
void release_spares(coordinator_pointer self);
void observe_routing(coordinator_pointer self, const std::string& window);

// coordinator_shell.cpp
caf::result<shell_reply> run_shell_command(
  coordinator_pointer self, const std::string& command,
  const std::vector<std::string>& args);

} // namespace tutti
