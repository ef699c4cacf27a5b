#pragma once
// A fault-injection drill: the job to run and the faults to inject, in
// order, each once the job has reached its step.
//
//   config: drill-job.yaml      # the job, relative to this file
//   step_timeout_s: 120         # longest wait for progress (default 300)
//   faults:
//     - {fault: kill_expert, rank: 1, at_step: 10}
//     - {fault: hang_rank, rank: 0, at_step: 30}
//     - {fault: kill_daemon, node: 1, at_step: 50, restart_after_s: 1}
//     - {fault: kill_daemon, nodes: [2, 3], at_step: 60}  # at once
//     - {fault: kill_daemon, node: 1, at_step: 65, during_checkpoint: true}
//     - {fault: crash_checkpoint, node: 0, at_step: 70}

#include <string>
#include <vector>

#include "tutti/config/job_config.hpp"

namespace tutti::cli {

struct drill_fault {
  std::string fault;
  int64_t rank = -1;
  int64_t node = -1;
  // kill_daemon: every node killed at once (`node` is the first of them).
  std::vector<int64_t> nodes;
  int64_t at_step = 0;
  double restart_after_s = 1; // kill_daemon: when the daemon comes back
  // kill_daemon: at a step whose checkpoint is still being written (the
  // daemons' writers then hold each shard a while, as a large model's
  // take, so the kill lands inside the write).
  bool during_checkpoint = false;
};

// How long a drill with `during_checkpoint` faults has each shard held.
constexpr int drill_checkpoint_write_ms = 400;

struct drill_plan {
  std::string config_path; // absolute
  job_config job;
  double step_timeout_s = 300;
  std::vector<drill_fault> faults;
};

// Faults that the drill can measure: in place (a supervisor restarts an
// actor) or job-level (the coordinator recovers from a checkpoint).
bool recovered_in_place(const std::string& fault);

// Loads and checks a drill file: the plan, or one line naming the key.
expected<drill_plan> load_drill_plan(const std::string& path);

} // namespace tutti::cli
