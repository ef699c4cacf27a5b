#pragma once
// With in-memory replicas (elastic.replica_interval_steps) a process makes
// and drops a copy of every rank's state each interval: tens of megabytes
// and more a step. glibc's defaults hand that memory back to the kernel
// and take it again, so every copy page-faults its way in (on a VM, most
// of the copy's cost: bench/bench_replicas.sh). This keeps freed memory in
// one heap for the next copy. Call it once at the start of a process,
// before its threads.

#include "tutti/config/job_config.hpp"

namespace tutti::elastic {

// Whether it changed the allocator (replicas on).
bool keep_memory_for_replicas(const job_config& cfg);

} // namespace tutti::elastic
