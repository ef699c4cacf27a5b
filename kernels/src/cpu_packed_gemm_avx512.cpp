// packed_gemm's kernel for CPUs with AVX-512 and FMA; this file alone is
// built with -mavx512f -mfma (serve/CMakeLists.txt), and it includes no
// header with inline functions another file could share, so nothing here
// runs on a CPU without them (packed_gemm.cpp checks before calling).
// Every output is a chain of fused multiply-adds over the inner dimension,
// left to right, in 16-output registers or one at a time for the last
// outputs: a fused multiply-add rounds once, the same in every lane and in
// the scalar instruction, so an output's bits do not depend on which path
// or block computed it, nor on the number of rows.

#include <immintrin.h>

#include <cstdint>

namespace tutti::kernels {

namespace {

// R rows x C registers of 16 outputs, over the whole inner dimension.
// (The loops over r and c unroll fully, so the accumulators live in
// registers.)
template <int R, int C>
inline void block(const float* x, int64_t ldx, const float* wt, int64_t n,
                  int64_t k, float* y, int64_t ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
      acc[r][c] = _mm512_setzero_ps();
  for (int64_t t = 0; t < k; ++t) {
    const float* wr = wt + t * n;
    __m512 w[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
      w[c] = _mm512_loadu_ps(wr + 16 * c);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * ldx + t]);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c)
        acc[r][c] = _mm512_fmadd_ps(w[c], xv, acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
      _mm512_storeu_ps(y + r * ldy + 16 * c, acc[r][c]);
}

template <int R, int C>
inline void strips(const float* x, int64_t ldx, const float* wt, int64_t n,
                   int64_t k, float* y, int64_t ldy, int64_t m, int64_t j) {
  int64_t i = 0;
  for (; i + R <= m; i += R)
    block<R, C>(x + i * ldx, ldx, wt + j, n, k, y + i * ldy + j, ldy);
  // The last rows together (an expert's rows rarely come in fours).
  float* out = y + i * ldy + j;
  if (m - i == 3)
    block<3, C>(x + i * ldx, ldx, wt + j, n, k, out, ldy);
  else if (m - i == 2)
    block<2, C>(x + i * ldx, ldx, wt + j, n, k, out, ldy);
  else if (m - i == 1)
    block<1, C>(x + i * ldx, ldx, wt + j, n, k, out, ldy);
}

} // namespace

// Column strips of 64 outputs, each over every row in blocks of 4 (the
// strip's weights stay in cache while the rows pass; 16 accumulators of
// the 32 registers), then strips of 16, then single outputs.
void packed_gemm_avx512(const float* x, int64_t ldx, const float* wt,
                        int64_t n, int64_t k, float* y, int64_t ldy,
                        int64_t m) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64)
    strips<4, 4>(x, ldx, wt, n, k, y, ldy, m, j);
  for (; j + 16 <= n; j += 16)
    strips<4, 1>(x, ldx, wt, n, k, y, ldy, m, j);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t jj = j; jj < n; ++jj) {
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t)
        acc = __builtin_fmaf(wt[t * n + jj], x[i * ldx + t], acc);
      y[i * ldy + jj] = acc;
    }
}

} // namespace tutti::kernels
