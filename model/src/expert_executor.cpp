#include "tutti/model/expert_executor.hpp"

#include <numeric>

namespace tutti::model {

status expert_executor::forward_chunks(
  int64_t layer, const float* x, float* y, int64_t hidden,
  const std::vector<std::vector<int64_t>>& rows,
  const std::function<status(size_t)>& ready, double& /*overlapped_s*/) {
  int64_t start = 0;
  for (size_t c = 0; c < rows.size(); ++c) {
    const int64_t m =
      std::accumulate(rows[c].begin(), rows[c].end(), int64_t{0});
    TUTTI_RETURN_IF_ERROR(forward(layer, x + start * hidden, rows[c].data(), m,
                                  y + start * hidden, c > 0));
    TUTTI_RETURN_IF_ERROR(ready(c));
    start += m;
  }
  return {};
}

} // namespace tutti::model
