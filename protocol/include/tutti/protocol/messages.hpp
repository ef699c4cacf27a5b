#pragma once
// Messages that can cross a node boundary: plain structs with an inspect
// overload each (CAF serialises them through it).

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tutti {

// One rank's account of one finished step. Loss, aux/z loss, grad norm,
// tokens, dropped and expert counts are global (identical on all ranks);
// the times are this rank's.
struct step_report {
  int64_t step = 0;
  int32_t rank = 0;
  double loss = 0;
  double aux_loss = 0;
  double z_loss = 0;
  double grad_norm = 0;
  double lr = 0;
  int64_t tokens = 0;
  int64_t dropped_tokens = 0;
  int64_t alltoall_bytes = 0;         // this rank's dispatch + combine payload
  std::vector<int64_t> expert_counts; // [layer][expert]
  double time_compute_s = 0;
  double time_alltoall_s = 0;
  double time_overlap_s = 0; // of time_alltoall_s: while experts computed
  double time_allreduce_s = 0;
  double time_other_s = 0;
  double step_time_s = 0;
  // CAF 0.17's serializer turns NaN into -1, so "not evaluated" is a flag.
  bool evaluated = false;
  double eval_loss = 0;
  int64_t epoch = 0;               // membership epoch the step ran in
  std::vector<double> router_bias; // [layer][expert], rank 0's (global)
  // Of step_time_s: waiting for this rank's batch from its data loader.
  double time_data_s = 0;
  // Of time_alltoall_s: waiting for the other ranks to arrive (uneven
  // expert load), where the transport can tell (ranks of one process).
  double time_alltoall_wait_s = 0;
  // Rank 0, at the end of a window of moe_config.routing_stats_window
  // steps: the window's routing statistics summed over ranks (JSON,
  // placement/routing_stats.hpp); empty otherwise.
  std::string routing_window;
  // Of alltoall_bytes, what went over each link class: within the rank,
  // intra_node, intra_rack, inter_rack (this rank's; summed when merged).
  std::vector<int64_t> alltoall_bytes_by_link;
  // Pipeline parallelism: waiting for and exchanging with the neighbouring
  // stages (merged: rank 0's, stage 0's idle time in the 1F1B bubble).
  double time_pipeline_s = 0;
  // Pipeline parallelism: the schedule's wall time (its forwards,
  // backwards and exchanges), and the share of all stages' time in it
  // spent idle (train::step_timers::pipeline_bubble).
  double time_pipeline_schedule_s = 0;
  double pipeline_bubble = 0;
  // Of time_compute_s: running a busier shard's expert tiles instead of
  // waiting in an exchange (moe_config.share_idle_cores).
  double time_lent_s = 0;
  // In-memory replicas (elastic.replica_interval_steps): the newest step
  // whose copy to and from the peer node has landed (merged: the oldest
  // rank's, the newest step a recovery loses nothing back to), the bytes
  // sent for it and how long it travelled (beside the next step), and of
  // time_other_s the stall for the copies (the snapshot, and waiting for
  // a copy still travelling).
  int64_t replica_step = 0;
  int64_t replica_bytes = 0;
  double time_replica_copy_s = 0;
  double time_replica_s = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_report& x) {
  return f(
    caf::meta::type_name("step_report"), x.step, x.rank, x.loss, x.aux_loss,
    x.z_loss, x.grad_norm, x.lr, x.tokens, x.dropped_tokens, x.alltoall_bytes,
    x.expert_counts, x.time_compute_s, x.time_alltoall_s, x.time_overlap_s,
    x.time_allreduce_s, x.time_other_s, x.step_time_s, x.evaluated, x.eval_loss,
    x.epoch, x.router_bias, x.time_data_s, x.time_alltoall_wait_s,
    x.routing_window, x.alltoall_bytes_by_link, x.time_pipeline_s,
    x.time_pipeline_schedule_s, x.pipeline_bubble, x.time_lent_s,
    x.replica_step, x.replica_bytes, x.time_replica_copy_s, x.time_replica_s);
}

// A node daemon's request to join the job.
struct node_registration {
  int64_t node_rank = 0;
  std::string host;
  int64_t port = 0;
  std::string rack;
  int64_t devices = 0;            // ranks it hosts
  std::string config_fingerprint; // fingerprint_text() of its config
  // "component=value" lines (lifecycle/environment.hpp); empty: not checked.
  std::vector<std::string> environment;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_registration& x) {
  return f(caf::meta::type_name("node_registration"), x.node_rank, x.host,
           x.port, x.rack, x.devices, x.config_fingerprint, x.environment);
}

// One node's interconnect measurements (tutti diag): directional
// point-to-point bandwidth and latency to each peer (NaN for itself), and
// all-to-all bus bandwidth at several sizes, through tutti's communicator
// and through raw Gloo for comparison.
struct diag_row {
  int64_t node_rank = 0;
  std::vector<double> send_gbps;
  std::vector<double> latency_us;
  std::vector<int64_t> sizes;         // bytes per peer
  std::vector<double> busbw_gbps;     // nccl-tests busbw, tutti communicator
  std::vector<double> raw_busbw_gbps; // same sizes, gloo::alltoall directly
  std::string error;                  // non-empty if the probe failed
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, diag_row& x) {
  return f(caf::meta::type_name("diag_row"), x.node_rank, x.send_gbps,
           x.latency_us, x.sizes, x.busbw_gbps, x.raw_busbw_gbps, x.error);
}

// One child of a supervisor, as `which_children` reports it.
struct child_status {
  std::string id;
  bool running = false;
  int64_t restarts = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, child_status& x) {
  return f(caf::meta::type_name("child_status"), x.id, x.running, x.restarts);
}

// The cluster's diag: the printed report and the nodes named as stragglers.
struct diag_report {
  std::string text;
  std::vector<int64_t> stragglers;
  bool ok = true; // false if the probe itself failed
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, diag_report& x) {
  return f(caf::meta::type_name("diag_report"), x.text, x.stragglers, x.ok);
}

} // namespace tutti

namespace tutti {

// A fault to inject into a live job (tutti chaos, tutti drill, tests):
//   kill_expert, raise_expert, nan_expert, kill_loader, kill_writer,
//   kill_rank, hang_rank, slow_rank, crash_checkpoint  (on `rank`'s node)
//   kill_daemon                                         (the node `node`)
// `seconds`: how long slow_rank sleeps per step.
struct chaos_request {
  std::string fault;
  int64_t rank = -1;
  int64_t node = -1;
  double seconds = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chaos_request& x) {
  return f(caf::meta::type_name("chaos_request"), x.fault, x.rank, x.node,
           x.seconds);
}

// The coordinator's view of the job, for tutti status / drill / shell.
struct job_status {
  std::string state; // pending running recovering paused completed ...
  int64_t step = 0;  // last step every rank finished
  int64_t steps = 0; // of the job
  int64_t epoch = 0; // membership epoch: +1 per recovery
  int64_t last_checkpoint = 0;
  double loss = 0;
  int64_t recoveries = 0;          // job-level (communicator rebuilt)
  int64_t restarts = 0;            // in place (actors restarted by supervisors)
  std::vector<int64_t> nodes;      // node ranks connected now
  std::string message;             // why paused / failed, if so
  std::vector<std::string> alerts; // firing now: "level name: text"
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_status& x) {
  return f(caf::meta::type_name("job_status"), x.state, x.step, x.steps,
           x.epoch, x.last_checkpoint, x.loss, x.recoveries, x.restarts,
           x.nodes, x.message, x.alerts);
}

} // namespace tutti

namespace tutti {

// One actor of a node's tree, as the shell's `actors` lists it.
struct actor_info {
  std::string path;  // node1/expert_shard/3
  std::string kind;  // expert_shard, supervisor, rank, ...
  std::string state; // running, down, busy
  int64_t restarts = 0;
  int64_t mailbox = -1; // -1: not known (busy in a long step)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_info& x) {
  return f(caf::meta::type_name("actor_info"), x.path, x.kind, x.state,
           x.restarts, x.mailbox);
}

} // namespace tutti
