#pragma once
// Internal: arithmetic that both backends run as written, the CPU on the
// host and the CUDA kernels on the device, so the two cannot drift apart.
// The CPU files are compiled by the host compiler, where TUTTI_HOST_DEVICE
// is empty; the .cu files by nvcc.

#include <math.h>

#include <cstdint>

#ifdef __CUDACC__
#define TUTTI_HOST_DEVICE __host__ __device__
#else
#define TUTTI_HOST_DEVICE
#endif

namespace tutti::kernels::detail {

// Written so that exp never overflows for large |g|. (::exp is the C
// library's on the host, CUDA's on the device.)
TUTTI_HOST_DEVICE inline double sigmoid(double g) {
  if (g >= 0.0)
    return 1.0 / (1.0 + ::exp(-g));
  const double e = ::exp(g);
  return e / (1.0 + e);
}

// DeepSeek-V3 bias balancing, bias_i += rate * sign(mean(counts) - counts_i),
// over the few experts in index order (one thread on the device).
template <class T>
TUTTI_HOST_DEVICE void balance_bias(T* bias, const int64_t* counts,
                                    int64_t experts, double rate) {
  double mean = 0.0;
  for (int64_t e = 0; e < experts; ++e)
    mean += double(counts[e]);
  mean /= double(experts);
  for (int64_t e = 0; e < experts; ++e) {
    const double diff = mean - double(counts[e]);
    const double sign = diff > 0.0 ? 1.0 : (diff < 0.0 ? -1.0 : 0.0);
    bias[e] += T(rate * sign);
  }
}

} // namespace tutti::kernels::detail
