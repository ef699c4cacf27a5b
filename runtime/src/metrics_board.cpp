#include "tutti/runtime/metrics_board.hpp"

#include <cstdio>

namespace tutti {

int64_t resident_memory_bytes() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2)
      resident = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(resident) * 4096;
}

} // namespace tutti
