#pragma once
// Typed handles of tutti's actors: what each one answers to.

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/typed_response_promise.hpp>

#include <string>
#include <vector>

#include "tutti/protocol/type_ids.hpp"

namespace tutti {

// Owns one rank's experts (weights, gradients, AdamW state) and computes
// them on the rows its rank dispatched to it.
using expert_shard_actor = caf::typed_actor<
  caf::replies_to<expert_fwd_atom, expert_task_ptr>::with<caf::ok_atom>,
  caf::replies_to<expert_bwd_atom, expert_task_ptr>::with<caf::ok_atom>,
  caf::replies_to<grads_atom>::with<grad_view>,
  caf::replies_to<optimize_atom, optimizer_args>::with<caf::ok_atom>,
  caf::replies_to<snapshot_atom, int64_t>::with<rank_snapshot_ptr>,
  caf::replies_to<restore_atom, rank_snapshot_ptr>::with<caf::ok_atom>,
  caf::replies_to<zero_grads_atom>::with<caf::ok_atom>,
  caf::reacts_to<chaos_atom, std::string>,
  caf::replies_to<mailbox_atom>::with<int64_t>>;

// Persists rank snapshots as shard files of a checkpoint directory and tells
// the coordinator (shard_saved / shard_failed).
using checkpoint_writer_actor = caf::typed_actor<
  caf::reacts_to<ckpt_write_atom, rank_snapshot_ptr, std::string>,
  caf::reacts_to<chaos_atom, std::string>,
  caf::replies_to<mailbox_atom>::with<int64_t>>;

// Owns the daemon's RocksDB: commits checkpoints (MANIFEST, record,
// retention) and appends events.
using journal_actor = caf::typed_actor<
  caf::replies_to<commit_request>::with<int64_t>, caf::reacts_to<job_event>,
  caf::reacts_to<job_final_state>,
  caf::replies_to<events_atom, int64_t>::with<std::vector<std::string>>,
  // The job's config versions: {"history"} or {"diff", V1, V2}, as lines.
  caf::replies_to<config_atom, std::vector<std::string>>::with<
    std::vector<std::string>>,
  caf::reacts_to<routing_window_atom, int64_t, std::string>>;

// Hands one rank its batches, deterministically from (seed, step, rank),
// prefetching ahead.
using data_loader_actor = caf::typed_actor<
  caf::replies_to<next_batch_atom, int64_t>::with<token_batch_ptr>,
  caf::replies_to<eval_batch_atom, int64_t>::with<token_batch_ptr>,
  caf::reacts_to<prefetch_atom>, caf::replies_to<mailbox_atom>::with<int64_t>>;

// Writes metrics.jsonl and the terminal progress line; rewind_atom drops
// the lines after a step (the job went back to that checkpoint).
using metrics_writer_actor = caf::typed_actor<
  caf::reacts_to<step_report>, caf::reacts_to<rewind_atom, int64_t>>;

// The root of one node's actor tree. epoch_start: run an epoch's ranks;
// abort: end the ranks of older epochs now (recovery).
using node_supervisor_actor = caf::typed_actor<
  caf::reacts_to<epoch_start>, caf::reacts_to<abort_atom, int64_t>,
  caf::reacts_to<stop_atom>, caf::reacts_to<diag_atom, int64_t>,
  caf::replies_to<chaos_atom, chaos_request>::with<std::string>,
  caf::reacts_to<escalate_atom, std::string>, caf::reacts_to<child_restarted>,
  caf::reacts_to<tick_atom>,
  caf::replies_to<get_coordinator_atom>::with<caf::actor>,
  caf::replies_to<actors_atom>::with<std::vector<actor_info>>,
  caf::replies_to<log_query>::with<std::vector<std::string>>,
  caf::reacts_to<pause_atom>, caf::reacts_to<resume_atom>,
  caf::reacts_to<checkpoint_now_atom>,
  caf::replies_to<actor_exit_atom, std::string, bool>::with<std::string>,
  caf::reacts_to<drain_atom>, caf::reacts_to<job_outcome>,
  caf::replies_to<replicas_atom>::with<std::vector<replica_held>>,
  // Write the held replicas of (epoch, step) of these ranks as that
  // step's checkpoint shards (the writer reports each shard_saved).
  caf::reacts_to<write_replicas_atom, int64_t, int64_t,
                 std::vector<int64_t>>>;

// Membership, rendezvous store, job state; one per job.
using coordinator_actor = caf::typed_actor<
  caf::replies_to<register_atom, node_registration,
                  caf::actor>::with<caf::ok_atom>,
  // A spare daemon (node_rank -1) waits to be told assign_atom and a
  // node rank; job_outcome when the job ends first.
  caf::replies_to<spare_atom, node_registration,
                  caf::actor>::with<caf::ok_atom>,
  caf::reacts_to<join_deadline_atom>,
  caf::replies_to<diag_atom>::with<diag_report>, caf::reacts_to<diag_row>,
  caf::replies_to<store_set_atom, std::string, std::string>::with<caf::ok_atom>,
  caf::replies_to<store_get_atom, std::string>::with<std::string>,
  caf::replies_to<store_wait_atom,
                  std::vector<std::string>>::with<caf::ok_atom>,
  caf::reacts_to<step_report>, caf::reacts_to<rank_done>,
  caf::reacts_to<rank_failed>, caf::replies_to<node_heartbeat>::with<int64_t>,
  caf::replies_to<shell_atom, std::string,
                  std::vector<std::string>>::with<shell_reply>,
  caf::reacts_to<alert_report>, caf::reacts_to<node_aborted>,
  caf::reacts_to<job_event>,
  caf::replies_to<chaos_atom, chaos_request>::with<std::string>,
  caf::replies_to<status_atom>::with<job_status>, caf::reacts_to<tick_atom>,
  caf::reacts_to<escalate_atom, std::string>, caf::reacts_to<shard_saved>,
  caf::reacts_to<shard_failed>>;

} // namespace tutti
