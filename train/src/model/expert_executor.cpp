#include "tutti/train/expert_executor.hpp"

#include <algorithm>
#include <numeric>

namespace tutti::train {

int64_t combine_chunk_count(const job_config& cfg) {
  if (cfg.ep_size() == 1)
    return 1;
  return std::min<int64_t>(cfg.moe.combine_chunks, cfg.experts_per_rank());
}

std::vector<int64_t> chunk_starts(
  const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> start(rows.size() + 1, 0);
  for (size_t c = 0; c < rows.size(); ++c)
    start[c + 1] = start[c]
                   + std::accumulate(rows[c].begin(), rows[c].end(),
                                     int64_t{0});
  return start;
}

status expert_executor::forward_chunks(
  int64_t layer, const float* x, float* y, int64_t hidden,
  const std::vector<std::vector<int64_t>>& rows,
  const std::function<status(size_t)>& ready, double& /*overlapped_s*/) {
  const auto start = chunk_starts(rows);
  for (size_t c = 0; c < rows.size(); ++c) {
    TUTTI_RETURN_IF_ERROR(forward(layer, x + start[c] * hidden, rows[c].data(),
                                  start[c + 1] - start[c],
                                  y + start[c] * hidden, c > 0));
    TUTTI_RETURN_IF_ERROR(ready(c));
  }
  return {};
}

status expert_executor::backward_chunks(
  int64_t layer, const float* dy, float* dx, int64_t hidden,
  const std::vector<std::vector<int64_t>>& rows,
  const std::function<status(size_t)>& ready, double& /*overlapped_s*/) {
  const auto start = chunk_starts(rows);
  for (size_t c = 0; c < rows.size(); ++c) {
    TUTTI_RETURN_IF_ERROR(
      backward(layer, dy + start[c] * hidden, start[c + 1] - start[c],
               dx + start[c] * hidden, rows[c].data(), start[c]));
    TUTTI_RETURN_IF_ERROR(ready(c));
  }
  return {};
}

} // namespace tutti::train
