#pragma once
// The one CAF type ID block of tutti: every message type and atom.

#include <caf/type_id.hpp>

#include <string>
#include <vector>

#include "tutti/protocol/job_messages.hpp"
#include "tutti/protocol/local_messages.hpp"
#include "tutti/protocol/messages.hpp"
#include "tutti/protocol/shell_messages.hpp"

CAF_BEGIN_TYPE_ID_BLOCK(tutti, caf::first_custom_type_id)

CAF_ADD_TYPE_ID(tutti, (tutti::step_report))
CAF_ADD_TYPE_ID(tutti, (tutti::node_registration))
CAF_ADD_TYPE_ID(tutti, (tutti::diag_row))
CAF_ADD_TYPE_ID(tutti, (tutti::diag_report))
CAF_ADD_TYPE_ID(tutti, (std::vector<double>))
CAF_ADD_TYPE_ID(tutti, (tutti::child_status))
CAF_ADD_TYPE_ID(tutti, (std::vector<tutti::child_status>))
CAF_ADD_TYPE_ID(tutti, (std::vector<std::string>))
CAF_ADD_TYPE_ID(tutti, (std::vector<int64_t>))
CAF_ADD_TYPE_ID(tutti, (tutti::chaos_request))
CAF_ADD_TYPE_ID(tutti, (tutti::job_status))
CAF_ADD_TYPE_ID(tutti, (tutti::actor_info))
CAF_ADD_TYPE_ID(tutti, (std::vector<tutti::actor_info>))
CAF_ADD_TYPE_ID(tutti, (tutti::shell_reply))
CAF_ADD_TYPE_ID(tutti, (tutti::status_view))
CAF_ADD_TYPE_ID(tutti, (tutti::node_view))
CAF_ADD_TYPE_ID(tutti, (std::vector<tutti::node_view>))
CAF_ADD_TYPE_ID(tutti, (tutti::expert_load))
CAF_ADD_TYPE_ID(tutti, (std::vector<tutti::expert_load>))
CAF_ADD_TYPE_ID(tutti, (tutti::layer_load))
CAF_ADD_TYPE_ID(tutti, (std::vector<tutti::layer_load>))
CAF_ADD_TYPE_ID(tutti, (tutti::epoch_start))
CAF_ADD_TYPE_ID(tutti, (tutti::node_aborted))
CAF_ADD_TYPE_ID(tutti, (tutti::node_heartbeat))
CAF_ADD_TYPE_ID(tutti, (tutti::rank_done))
CAF_ADD_TYPE_ID(tutti, (tutti::rank_failed))
CAF_ADD_TYPE_ID(tutti, (tutti::shard_saved))
CAF_ADD_TYPE_ID(tutti, (tutti::shard_failed))
CAF_ADD_TYPE_ID(tutti, (tutti::commit_request))
CAF_ADD_TYPE_ID(tutti, (tutti::job_event))
CAF_ADD_TYPE_ID(tutti, (tutti::alert_report))
CAF_ADD_TYPE_ID(tutti, (tutti::log_query))
CAF_ADD_TYPE_ID(tutti, (tutti::job_outcome))
CAF_ADD_TYPE_ID(tutti, (tutti::job_final_state))
CAF_ADD_TYPE_ID(tutti, (tutti::child_restarted))
CAF_ADD_TYPE_ID(tutti, (tutti::replica_held))
CAF_ADD_TYPE_ID(tutti, (std::vector<tutti::replica_held>))

// Rendezvous store served by the coordinator (Gloo's store, NCCL's id).
CAF_ADD_ATOM(tutti, tutti, store_set_atom, "store_set")
CAF_ADD_ATOM(tutti, tutti, store_get_atom, "store_get")
CAF_ADD_ATOM(tutti, tutti, store_wait_atom, "store_wait")

// Job lifecycle.
CAF_ADD_ATOM(tutti, tutti, escalate_atom, "escalate")
CAF_ADD_ATOM(tutti, tutti, stop_atom, "stop")
CAF_ADD_ATOM(tutti, tutti, register_atom, "register")
CAF_ADD_ATOM(tutti, tutti, join_deadline_atom, "join_dl")
CAF_ADD_ATOM(tutti, tutti, diag_atom, "diag")

// Checkpoints.
CAF_ADD_ATOM(tutti, tutti, snapshot_atom, "snapshot")
CAF_ADD_ATOM(tutti, tutti, restore_atom, "restore")
CAF_ADD_ATOM(tutti, tutti, ckpt_write_atom, "ckpt_write")

// Supervision and recovery.
CAF_ADD_ATOM(tutti, tutti, children_atom, "children")
CAF_ADD_ATOM(tutti, tutti, which_child_atom, "which")
CAF_ADD_ATOM(tutti, tutti, tick_atom, "tick")
CAF_ADD_ATOM(tutti, tutti, abort_atom, "abort")
CAF_ADD_ATOM(tutti, tutti, chaos_atom, "chaos")
CAF_ADD_ATOM(tutti, tutti, status_atom, "status")
CAF_ADD_ATOM(tutti, tutti, rewind_atom, "rewind")
CAF_ADD_ATOM(tutti, tutti, zero_grads_atom, "zero_grads")

// The shell and observability.
CAF_ADD_ATOM(tutti, tutti, shell_atom, "shell")
CAF_ADD_ATOM(tutti, tutti, get_coordinator_atom, "get_coord")
CAF_ADD_ATOM(tutti, tutti, actors_atom, "actors")
CAF_ADD_ATOM(tutti, tutti, events_atom, "events")
CAF_ADD_ATOM(tutti, tutti, pause_atom, "pause")
CAF_ADD_ATOM(tutti, tutti, resume_atom, "resume")
CAF_ADD_ATOM(tutti, tutti, checkpoint_now_atom, "ckpt_now")
CAF_ADD_ATOM(tutti, tutti, actor_exit_atom, "actor_exit")
CAF_ADD_ATOM(tutti, tutti, drain_atom, "drain")
CAF_ADD_ATOM(tutti, tutti, mailbox_atom, "mailbox")

// Rank <-> expert shard (local).
CAF_ADD_ATOM(tutti, tutti, expert_fwd_atom, "expert_fwd")
CAF_ADD_ATOM(tutti, tutti, expert_bwd_atom, "expert_bwd")
CAF_ADD_ATOM(tutti, tutti, grads_atom, "grads")
CAF_ADD_ATOM(tutti, tutti, optimize_atom, "optimize")

// Rank <-> data loader (local).
CAF_ADD_ATOM(tutti, tutti, next_batch_atom, "next_batch")
CAF_ADD_ATOM(tutti, tutti, eval_batch_atom, "eval_batch")
CAF_ADD_ATOM(tutti, tutti, prefetch_atom, "prefetch")

// Metrics.
CAF_ADD_ATOM(tutti, tutti, job_summary_atom, "summary")

// Config versions (lifecycle/): the shell's `config history|diff`, from the journal.
CAF_ADD_ATOM(tutti, tutti, config_atom, "config")
// Routing statistics of a window of steps, coordinator -> journal.
CAF_ADD_ATOM(tutti, tutti, routing_window_atom, "routing_w")
// A daemon without a node rank offers itself as a spare; the coordinator
// assigns it the node rank of a lost or drained node.
CAF_ADD_ATOM(tutti, tutti, spare_atom, "spare")
CAF_ADD_ATOM(tutti, tutti, assign_atom, "assign")
// In-memory replicas of training state: what a node holds, and writing
// the ones named as a checkpoint (a recovery resumes from them).
CAF_ADD_ATOM(tutti, tutti, replicas_atom, "replicas")
CAF_ADD_ATOM(tutti, tutti, write_replicas_atom, "write_rep")

CAF_END_TYPE_ID_BLOCK(tutti)
