#pragma once
// What one step measured, before it is reported.

#include <chrono>
#include <cstdint>
#include <vector>

namespace tutti::train {

struct step_timers {
  double compute_s = 0, alltoall_s = 0, allreduce_s = 0;
  // Of alltoall_s, the time the combine (forward and backward) ran while
  // the expert shard was computing the next chunk.
  double overlap_s = 0;
  // Of alltoall_s, waiting for the other members to arrive: their being
  // late (uneven expert load, mostly), not the exchange. Measured where the
  // transport can tell (ranks of one process); 0 otherwise.
  double alltoall_wait_s = 0;
  // Time this rank's thread, instead of waiting in an exchange, ran tiles of
  // a busier expert shard of its process (idle_core_pool.hpp). Counted as
  // compute, not in alltoall_s.
  double lent_s = 0;
  // Pipeline parallelism: waiting for and exchanging with the neighbouring
  // stages (the pipeline bubble, mostly).
  double pipeline_s = 0;
  // The schedule's wall time (forwards, backwards, exchanges).
  double pipeline_schedule_s = 0;
  // The pipeline's bubble over all stages: 1 - (the stages' computing
  // time, summed) / (stages x the longest stage's schedule), the share of
  // stage-time spent idle, which the 1F1B formulas predict.
  double pipeline_bubble = 0;
};

// Adds the wall time of its scope to one of the step_timers' fields.
class scoped_timer {
public:
  explicit scoped_timer(double& sink)
    : sink_(sink), start_(std::chrono::steady_clock::now()) {}
  ~scoped_timer() {
    sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now()
                                           - start_)
               .count();
  }

private:
  double& sink_;
  std::chrono::steady_clock::time_point start_;
};

// A collective's scope on `group`: its wall time into `sink`, less the time
// the member spent meanwhile on other work of its process (memory
// communicator's while_waiting), which goes to lent_s.
template <class Group>
class collective_timer {
public:
  collective_timer(double& sink, step_timers& time, const Group& group)
    : total_(sink), sink_(sink), time_(time), group_(group),
      lent_before_(group.lent_s()) {}
  ~collective_timer() {
    // total_ adds the scope's wall time after this body has run.
    const double lent = group_.lent_s() - lent_before_;
    sink_ -= lent;
    time_.lent_s += lent;
  }

private:
  scoped_timer total_;
  double& sink_;
  step_timers& time_;
  const Group& group_;
  double lent_before_;
};

// An all-to-all's scope: its wall time into alltoall_s (less the time lent),
// and of it the time the group's members waited for each other into
// alltoall_wait_s.
template <class Group>
class exchange_timer {
public:
  exchange_timer(step_timers& time, const Group& group)
    : total_(time.alltoall_s, time, group), wait_(time.alltoall_wait_s),
      group_(group), waited_before_(group.waited_s()) {}
  ~exchange_timer() { wait_ += group_.waited_s() - waited_before_; }

private:
  collective_timer<Group> total_;
  double& wait_;
  const Group& group_;
  double waited_before_;
};

struct step_stats {
  double loss = 0;      // mean cross-entropy over the global batch
  double aux_loss = 0;  // Switch loss, summed over layers
  double z_loss = 0;    // router z-loss, summed over layers
  double grad_norm = 0; // before clipping
  double lr = 0;
  int64_t tokens = 0;         // global tokens this step
  int64_t dropped_tokens = 0; // global (token, expert) assignments dropped
  int64_t alltoall_bytes = 0; // this rank's dispatch + combine payload sent
  std::vector<int64_t> alltoall_bytes_to; // of it, to each EP member
  std::vector<int64_t> expert_counts; // [layer][expert], global, pre-drop
  // In: this rank's vote to end the job after this step (0 or 1). Out: the
  // sum over ranks, so every rank stops at the same step boundary.
  double stop_votes = 0;
  step_timers time;
  // When set, the router's choices of this rank's tokens are appended,
  // [layer][token][k] (for routing statistics).
  std::vector<int32_t>* routing_ids = nullptr;
};

} // namespace tutti::train
