#pragma once
// A serving daemon's threads hand each token on and then wait: the HTTP
// front to the scheduler, the scheduler to its ranks, a rank to its expert
// shard once a layer, and back. Left to the kernel's wakeup preemption, a
// thread woken on the core its waker runs on takes the core at once, and
// the waker, about to wait, is switched back in only to start waiting:
// two switches a hand-off instead of one (the medium model served on one
// core: 22 a token, two in five of them such preemptions). SCHED_BATCH
// turns wakeup preemption off and leaves priority and share of the CPU as
// they were; a thread inherits it from the one that makes it. Where a core
// is idle the woken thread runs there and nothing changes.

#include <sched.h>

namespace tutti {

// For the calling thread and the threads it makes from now on; false where
// the system refuses it (they then run as before).
inline bool run_without_wakeup_preemption() {
  sched_param none{};
  return sched_setscheduler(0, SCHED_BATCH, &none) == 0;
}

} // namespace tutti
