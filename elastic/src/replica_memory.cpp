#include "tutti/elastic/replica_memory.hpp"

#include <malloc.h>

namespace tutti::elastic {

bool keep_memory_for_replicas(const job_config& cfg) {
  if (cfg.elastic.replica_interval_steps <= 0)
    return false;
  // One arena (threads' arenas would each grow and trim), blocks up to
  // 32 MiB from it rather than mapped one by one, never trimmed, and
  // grown 256 MiB at a time.
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
  return true;
}

} // namespace tutti::elastic
