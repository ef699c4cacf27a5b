#include "tutti/train/pipeline_order.hpp"

#include <algorithm>

namespace tutti::train {

std::vector<pipeline_op> pipeline_order(int64_t stages, int64_t chunks,
                                        int64_t micro_batches, int64_t stage) {
  const int64_t p = stages, v = chunks, m = micro_batches;
  const int64_t total = m * v;
  auto op = [&](bool forward, int64_t k) {
    if (v == 1)
      return pipeline_op{forward, k, 0};
    const int64_t chunk = k / p % v;
    return pipeline_op{forward, k / (p * v) * p + k % p,
                       forward ? chunk : v - 1 - chunk};
  };
  const int64_t warmup =
    std::min(total, v == 1 ? p - stage - 1 : (p - stage - 1) * 2 + (v - 1) * p);
  std::vector<pipeline_op> out;
  out.reserve(static_cast<size_t>(2 * total));
  for (int64_t k = 0; k < warmup; ++k)
    out.push_back(op(true, k));
  for (int64_t j = 0; j + warmup < total; ++j) {
    out.push_back(op(true, warmup + j));
    out.push_back(op(false, j));
  }
  for (int64_t j = total - warmup; j < total; ++j)
    out.push_back(op(false, j));
  return out;
}

int64_t micro_batches_in_flight(int64_t stages, int64_t chunks,
                                int64_t micro_batches, int64_t stage) {
  // A micro-batch is live from its first chunk's forward to the backward
  // of chunk 0 (its last); both come in micro-batch order.
  int64_t started = 0, finished = 0, most = 0;
  for (const auto& op : pipeline_order(stages, chunks, micro_batches, stage)) {
    if (op.forward && op.chunk == 0)
      started = std::max(started, op.micro + 1);
    if (!op.forward && op.chunk == 0)
      finished = std::max(finished, op.micro + 1);
    most = std::max(most, started - finished);
  }
  return std::max<int64_t>(most, 1);
}

} // namespace tutti::train
