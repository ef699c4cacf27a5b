#pragma once
// Cores that waiting ranks leave, lent to busy expert shards of the same
// process.
//
// Ranks of one process exchange through memory, so the all-to-all itself is
// a copy; what remains of it is waiting: the rank whose experts received
// fewer rows sits in the combine while the busiest shard still computes.
// A CPU shard therefore cuts its experts' work into tiles (expert_ffn.hpp)
// and runs them through this pool: it posts them, runs them itself, and a
// rank waiting in an exchange of the process runs them too (help_one(),
// which the memory communicator calls while it waits). No thread of its own
// competes for the cores: only a thread that would otherwise wait works.
// A tile's bounds depend only on the rows each expert received and it is
// computed by one thread with the same kernel calls wherever it runs, so
// the bits do not depend on who ran it.

#include <cstdint>
#include <functional>
#include <vector>

namespace tutti::train {

class idle_core_pool {
public:
  // The process's pool.
  static idle_core_pool& process();

  // A CPU shard joins for its lifetime; work is posted for others to help
  // with only while two or more are members.
  void join();
  void leave();
  int64_t members() const;

  // Runs every task and returns when all have finished: on the calling
  // thread, and, while there are other members, on threads calling
  // help_one(). Tasks are claimed in the given order. The first exception
  // a task throws is rethrown here, after the others finished.
  void run(const std::vector<std::function<void()>>& tasks);

  // Claims and runs one task of a run() in progress on another thread;
  // false when there is none to claim. `ran_s`, when set, gets the task's
  // wall time.
  bool help_one(double* ran_s = nullptr);

  // Tasks run by help_one() since the process started (for tests).
  int64_t lent_tasks() const;

  idle_core_pool(const idle_core_pool&) = delete;
  idle_core_pool& operator=(const idle_core_pool&) = delete;

private:
  idle_core_pool();
  ~idle_core_pool() = delete;
  struct impl;
  impl* const impl_;
  impl& get();
};

} // namespace tutti::train
