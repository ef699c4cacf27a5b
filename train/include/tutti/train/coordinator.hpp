#pragma once
// coordinator: one per job. Admits nodes (same config, within the join
// timeout), starts them once all have joined, serves the rendezvous store,
// gathers the ranks' step reports into one record per step, and keeps the
// job state: pending -> running -> completed | stopped | failed, with
// running -> recovering -> running after a failure it recovers from (see
// coordinator_recovery.cpp). Tells
// `listener` when the job ends with a job_outcome.

#include <caf/actor.hpp>

#include <memory>

#include "tutti/protocol/interfaces.hpp"
#include "tutti/runtime/metrics_board.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti {

enum class job_state {
  pending,
  running,
  recovering,
  completed,
  stopped,
  failed
};

const char* to_string(job_state s);

struct coordinator_args {
  job_config cfg;
  caf::actor listener;
  bool quiet = false;      // no progress lines on the terminal
  journal_actor journal;   // the daemon's RocksDB
  int64_t resume_step = 0; // the verified checkpoint to continue from
  std::shared_ptr<metrics_board> board; // /metrics text; null: none served
  // The coordinator's process environment, which every joining node's is
  // compared with (diag.environment); empty: not checked.
  std::vector<std::string> environment;
};

coordinator_actor spawn_coordinator(caf::actor_system& sys,
                                    coordinator_args args);

// Merges the reports of all ranks for one step: global values from rank 0,
// times and all-to-all bytes averaged, step time the slowest rank's.
step_report merge_reports(const std::vector<step_report>& reports);

} // namespace tutti
