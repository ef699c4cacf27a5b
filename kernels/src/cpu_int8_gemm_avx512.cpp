// The int8 product's kernel for CPUs with AVX-512 and FMA; this file alone
// of the int8 product is built with -mavx512f -mfma (kernels/CMakeLists.txt)
// and cpu_int8_gemm.cpp checks the CPU before calling it. As in
// cpu_packed_gemm_avx512.cpp, every output is one chain of fused
// multiply-adds over the inner dimension, left to right, in a vector lane
// or alone, then one multiply by its scale: the bits do not depend on the
// block that computed it nor on the number of rows. Sixteen codes widen to
// floats once per step of the chain and serve every row of the block.

#include <immintrin.h>

#include <cstdint>

// GCC 12's widening intrinsics start from _mm512_undefined_*(), which its
// flow analysis reports as uninitialised; every lane is written.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tutti::kernels {

namespace {

// R rows x C registers of 16 outputs, over the whole inner dimension.
template <int R, int C>
inline void block(const float* x, int64_t ldx, const int8_t* codes,
                  const float* scales, int64_t n, int64_t k, float* y,
                  int64_t ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
      acc[r][c] = _mm512_setzero_ps();
  for (int64_t t = 0; t < k; ++t) {
    const int8_t* wr = codes + t * n;
    __m512 w[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
      w[c] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + 16 * c))));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * ldx + t]);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c)
        acc[r][c] = _mm512_fmadd_ps(w[c], xv, acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    const __m512 s = _mm512_loadu_ps(scales + 16 * c);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      _mm512_storeu_ps(y + r * ldy + 16 * c, _mm512_mul_ps(acc[r][c], s));
  }
}

template <int R, int C>
inline void strips(const float* x, int64_t ldx, const int8_t* codes,
                   const float* scales, int64_t n, int64_t k, float* y,
                   int64_t ldy, int64_t m, int64_t j) {
  int64_t i = 0;
  for (; i + R <= m; i += R)
    block<R, C>(x + i * ldx, ldx, codes + j, scales + j, n, k,
                y + i * ldy + j, ldy);
  float* out = y + i * ldy + j;
  const float* xi = x + i * ldx;
  if (m - i == 3)
    block<3, C>(xi, ldx, codes + j, scales + j, n, k, out, ldy);
  else if (m - i == 2)
    block<2, C>(xi, ldx, codes + j, scales + j, n, k, out, ldy);
  else if (m - i == 1)
    block<1, C>(xi, ldx, codes + j, scales + j, n, k, out, ldy);
}

} // namespace

// Strips of 64 outputs over every row in blocks of 4, then strips of 16,
// then single outputs (the fp32 kernel's blocking).
void int8_gemm_avx512(const float* x, int64_t ldx, const int8_t* codes,
                      const float* scales, int64_t n, int64_t k, float* y,
                      int64_t ldy, int64_t m) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64)
    strips<4, 4>(x, ldx, codes, scales, n, k, y, ldy, m, j);
  for (; j + 16 <= n; j += 16)
    strips<4, 1>(x, ldx, codes, scales, n, k, y, ldy, m, j);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t jj = j; jj < n; ++jj) {
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t)
        acc = __builtin_fmaf(float(codes[t * n + jj]), x[i * ldx + t], acc);
      y[i * ldy + jj] = acc * scales[jj];
    }
}

} // namespace tutti::kernels
