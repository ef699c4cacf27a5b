#pragma once
// Small helpers of the exchanges (rack_exchange.cpp, rack_plan.cpp,
// rack_combine.cpp): counts to float counts and offsets, and a row gather
// whose index comes from the host.

#include <cstdint>
#include <numeric>
#include <vector>

#include "tutti/kernels/ops.hpp"
#include "tutti/kernels/tensor.hpp"

namespace tutti::moe::rack_rows {

inline std::vector<int64_t> times(const std::vector<int64_t>& counts,
                                  int64_t d) {
  std::vector<int64_t> out(counts.size());
  for (size_t i = 0; i < counts.size(); ++i)
    out[i] = counts[i] * d;
  return out;
}

// starts[i]: the sum of counts before i; starts[size]: the total.
inline std::vector<int64_t> starts(const std::vector<int64_t>& counts) {
  std::vector<int64_t> out(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), out.begin() + 1);
  return out;
}

inline int64_t total(const std::vector<int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

// dst[i] = src[index[i]] for rows of d floats, index from the host.
inline void gather(const kernels::stream& s,
                   kernels::tensor<int64_t>& index_dev,
                   const std::vector<int64_t>& index, const float* src,
                   float* dst, int64_t d) {
  if (index.empty())
    return;
  index_dev.upload(s, index);
  kernels::gather_rows(s, src, index_dev.data(), dst, int64_t(index.size()), d);
}

} // namespace tutti::moe::rack_rows
