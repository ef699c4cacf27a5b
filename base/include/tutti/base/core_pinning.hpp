#pragma once
// One core per CPU rank. A rank is one device (DESIGN.md §9); on the CPU
// its device is a core, and its expert shard's thread, which computes only
// while the rank waits for it, shares that core. Left to the scheduler the
// two threads of a rank often ran on different cores from layer to layer,
// so each read the other's freshly written rows from the other core's cache
// (a world-2 step's compute was 14% more than twice world 1's; pinned, it
// is what two separate processes take).
//
// Pinning is done only where the process hosts several ranks and every one
// of them gets a core of its own among those the process may run on
// (taskset, cgroups); a process of one rank, or with fewer cores than
// ranks, is left to the scheduler. Processes do not know of each other:
// several daemons of several ranks on one host each pin to the first cores
// of their own CPU set, so give each its own set (taskset, a cpuset) or
// turn pinning off (cluster_config.pin_rank_cores).

#include <sched.h>
#include <unistd.h>

#include <vector>

namespace tutti {

// Pins the calling thread to the `local_rank`-th CPU the process may use,
// `local_rank` of the `ranks_in_process` ranks the process hosts, when
// there are at least two and as many CPUs; returns that CPU, or -1 when it
// leaves the thread alone.
inline int pin_to_rank_core(int local_rank, int ranks_in_process) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  // The process's CPUs: its main thread's, which is never pinned (a thread
  // inherits the mask of the one that made it, pinned or not).
  if (sched_getaffinity(getpid(), sizeof(allowed), &allowed) != 0)
    return -1;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed))
      cpus.push_back(c);
  if (ranks_in_process < 2 || local_rank < 0 || local_rank >= ranks_in_process
      || static_cast<int>(cpus.size()) < ranks_in_process)
    return -1;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus[local_rank], &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0)
    return -1;
  return cpus[local_rank];
}

// Lets the calling thread run on any CPU the process may use (a helper
// thread a pinned rank starts would otherwise share the rank's core).
inline void run_on_process_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(getpid(), sizeof(allowed), &allowed) == 0)
    (void)sched_setaffinity(0, sizeof(allowed), &allowed);
}

} // namespace tutti
