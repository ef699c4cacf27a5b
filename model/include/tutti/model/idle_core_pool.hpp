#pragma once
// Cores that idle ranks leave, lent to busy expert shards of the same
// process.
//
// Ranks of one process exchange through memory, so the all-to-all itself is
// a copy; what remains of it is waiting: the rank whose experts received
// fewer tokens sits in the combine while the busiest shard still computes.
// A shard therefore hands its experts to this pool as tasks, largest first;
// it runs them itself and so do the pool's threads (one per other rank of
// the process), and the core a waiting rank leaves runs the busy shard's
// experts. Each task is one whole expert: its rows and its weight gradient
// are computed by one thread with the same kernel calls as before, so the
// bits do not depend on which thread ran it.

#include <cstdint>
#include <functional>
#include <vector>

namespace tutti::model {

class idle_core_pool {
public:
  // The process's pool.
  static idle_core_pool& process();

  // A CPU shard joins for its lifetime: with n shards in the process the
  // pool keeps n - 1 threads (it never shrinks; idle threads only wait).
  void join();
  void leave();

  // Runs every task, on the calling thread and on idle pool threads, in
  // the given order of claiming; returns when all have finished. The first
  // exception a task throws is rethrown here, after the others finished.
  void run(const std::vector<std::function<void()>>& tasks);

  int64_t threads() const;
  // Tasks run by pool threads since the process started (for tests).
  int64_t lent_tasks() const;

  idle_core_pool(const idle_core_pool&) = delete;
  idle_core_pool& operator=(const idle_core_pool&) = delete;

private:
  idle_core_pool() = default;
  ~idle_core_pool();
  struct impl;
  impl* impl_ = nullptr;
  impl& get();
};

} // namespace tutti::model
