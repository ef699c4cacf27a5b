#include "tutti/kernels/packed_gemm.hpp"

#include <cmath>

namespace tutti::kernels {

// packed_gemm_avx512.cpp
void packed_gemm_avx512(const float* x, int64_t ldx, const float* wt,
                        int64_t n, int64_t k, float* y, int64_t ldy,
                        int64_t m);

packed_matrix pack_matrix(const float* w, int64_t out, int64_t in) {
  packed_matrix p;
  p.in = in;
  p.out = out;
  p.t.resize(in * out);
  for (int64_t j = 0; j < out; ++j)
    for (int64_t t = 0; t < in; ++t)
      p.t[t * out + j] = w[j * in + t];
  return p;
}

namespace {

// Without AVX-512: the same chains of fused multiply-adds one output at a
// time (std::fma rounds once, as the instruction does), so the bits are
// those of the AVX-512 kernel; slower, and only for CPUs without it.
void packed_gemm_portable(const float* x, int64_t ldx, const float* wt,
                          int64_t n, int64_t k, float* y, int64_t ldy,
                          int64_t m) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t)
        acc = std::fma(wt[t * n + j], x[i * ldx + t], acc);
      y[i * ldy + j] = acc;
    }
}

} // namespace

void packed_gemm(const float* x, int64_t ldx, const packed_matrix& w, float* y,
                 int64_t ldy, int64_t m) {
  static const auto kernel = __builtin_cpu_supports("avx512f")
                                 && __builtin_cpu_supports("fma")
                               ? packed_gemm_avx512
                               : packed_gemm_portable;
  if (m > 0)
    kernel(x, ldx, w.t.data(), w.out, w.in, y, ldy, m);
}

} // namespace tutti::kernels
