#pragma once
// What ranks, node daemons and checkpoint writers tell the coordinator about
// a running job, and what the coordinator tells them and the journal. Each
// message is a struct with named fields and an inspect overload (CAF
// serialises it through that); the type itself says what the message is.
// They compare equal field by field (tests match whole messages).

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tutti {

// Coordinator -> node: run the ranks of membership epoch `epoch`, from the
// checkpoint of `resume_step` (0: from scratch).
struct epoch_start {
  int64_t resume_step = 0;
  int64_t epoch = 0;
  // The placement the coordinator planned again for this epoch (a spare
  // in another rack took a node's ranks), [layer][slot] -> expert; empty:
  // each node applies moe_config.placement.
  std::vector<int32_t> expert_at;
  // The nodes that train in this epoch, by node rank, ascending: the node
  // at index i runs world ranks i * nproc_per_node onward, in the layout
  // elastic::config_on_nodes derives. Empty: all of the job's nodes.
  std::vector<int64_t> nodes;

  friend bool operator==(const epoch_start&, const epoch_start&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, epoch_start& x) {
  return f(caf::meta::type_name("epoch_start"), x.resume_step, x.epoch,
           x.expert_at, x.nodes);
}

// Node -> coordinator (replicas_atom): one rank's state after `step` of
// membership epoch `epoch` (an epoch of `world` ranks), held in the node's
// memory (elastic.replica_interval_steps): the rank's own, or a peer's.
struct replica_held {
  int64_t epoch = 0;
  int64_t world = 0;
  int64_t step = 0;
  int64_t rank = 0;

  friend bool operator==(const replica_held&, const replica_held&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_held& x) {
  return f(caf::meta::type_name("replica_held"), x.epoch, x.world, x.step,
           x.rank);
}

// Node -> coordinator: this node has ended its ranks of `epoch`.
struct node_aborted {
  int64_t node = 0;
  int64_t epoch = 0;

  friend bool operator==(const node_aborted&, const node_aborted&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_aborted& x) {
  return f(caf::meta::type_name("node_aborted"), x.node, x.epoch);
}

// Node -> coordinator, every recovery.heartbeat_interval_ms: the node lives.
// The coordinator answers with its membership epoch, or an error when it no
// longer counts the node in.
struct node_heartbeat {
  int64_t node = 0;
  int64_t epoch = 0;          // whose ranks run on the node; -1: none
  int64_t resident_bytes = 0; // of the node's daemon

  friend bool operator==(const node_heartbeat&,
                         const node_heartbeat&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_heartbeat& x) {
  return f(caf::meta::type_name("node_heartbeat"), x.node, x.epoch,
           x.resident_bytes);
}

// Rank -> coordinator: the rank finished the job's steps (or stopped).
struct rank_done {
  int32_t rank = 0;
  int64_t last_step = 0;
  double final_eval_loss = 0; // rank 0's is the job's

  friend bool operator==(const rank_done&, const rank_done&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_done& x) {
  return f(caf::meta::type_name("rank_done"), x.rank, x.last_step,
           x.final_eval_loss);
}

// Rank or node -> coordinator: a failure the job recovers from.
struct rank_failed {
  int32_t rank = -1; // -1: not one rank's (a node's supervisor escalated)
  std::string reason;
  int64_t epoch = 0; // of the failed ranks; older epochs are ignored

  friend bool operator==(const rank_failed&, const rank_failed&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_failed& x) {
  return f(caf::meta::type_name("rank_failed"), x.rank, x.reason, x.epoch);
}

// Checkpoint writer -> coordinator: rank `rank`'s shard file of step `step`
// is on disk.
struct shard_saved {
  int64_t step = 0;
  int32_t rank = 0;
  int64_t bytes = 0;
  int64_t epoch = 0;

  friend bool operator==(const shard_saved&, const shard_saved&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_saved& x) {
  return f(caf::meta::type_name("shard_saved"), x.step, x.rank, x.bytes,
           x.epoch);
}

// Checkpoint writer -> coordinator: writing that shard file failed.
struct shard_failed {
  int64_t step = 0;
  int32_t rank = 0;
  std::string reason;
  int64_t epoch = 0;

  friend bool operator==(const shard_failed&, const shard_failed&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_failed& x) {
  return f(caf::meta::type_name("shard_failed"), x.step, x.rank, x.reason,
           x.epoch);
}

// Coordinator -> journal: every rank's shard of `step` is on disk; write the
// checkpoint's MANIFEST and record. The journal answers with its bytes.
struct commit_request {
  int64_t step = 0;
  int64_t world_size = 0;
  int64_t epoch = 0;

  friend bool operator==(const commit_request&,
                         const commit_request&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, commit_request& x) {
  return f(caf::meta::type_name("commit_request"), x.step, x.world_size,
           x.epoch);
}

// Anyone -> coordinator -> journal: one line of the job's event log.
struct job_event {
  std::string kind; // restart, alert, operator, resumed, ...
  std::string text;
  double seconds = 0; // how long it took, where that means something; -1: not

  friend bool operator==(const job_event&, const job_event&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_event& x) {
  return f(caf::meta::type_name("job_event"), x.kind, x.text, x.seconds);
}

// Metrics writer -> coordinator: an alert rule fired (or, with empty text,
// resolved).
struct alert_report {
  std::string name;
  std::string level; // critical | important | normal
  std::string text;  // empty: resolved

  friend bool operator==(const alert_report&, const alert_report&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, alert_report& x) {
  return f(caf::meta::type_name("alert_report"), x.name, x.level, x.text);
}

// Coordinator -> every node and the job's listener (tuttid, tutti run): the
// job is over, its last checkpoint committed or failed.
struct job_outcome {
  bool ok = true;             // completed or stopped; false: failed
  std::string message;        // why it stopped or failed; empty: completed
  double final_eval_loss = 0; // held-out loss at the end; NaN: none

  friend bool operator==(const job_outcome&, const job_outcome&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_outcome& x) {
  return f(caf::meta::type_name("job_outcome"), x.ok, x.message,
           x.final_eval_loss);
}

// Coordinator -> journal: record how the job ended (the daemon's next start
// reads it).
struct job_final_state {
  std::string state; // completed | stopped | failed
  int64_t last_step = 0;

  friend bool operator==(const job_final_state&,
                         const job_final_state&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_final_state& x) {
  return f(caf::meta::type_name("job_final_state"), x.state, x.last_step);
}

// OTP supervisor -> its parent: child `id` was restarted after `reason`.
struct child_restarted {
  std::string id;
  std::string reason;

  friend bool operator==(const child_restarted&,
                         const child_restarted&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, child_restarted& x) {
  return f(caf::meta::type_name("child_restarted"), x.id, x.reason);
}

// Coordinator -> node: the newest `max_lines` lines of the node's log at
// `level` or above.
struct log_query {
  std::string level;
  int64_t max_lines = 0;

  friend bool operator==(const log_query&, const log_query&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, log_query& x) {
  return f(caf::meta::type_name("log_query"), x.level, x.max_lines);
}

} // namespace tutti
