// The serving attention's kernels (invariant_ops.hpp): the scores of a
// block of cached keys and the weighted values, eight keys or a head's
// 32 outputs at a time on AVX2, each element the arithmetic of the
// key-by-key and position-by-position loops (so their bits); the softmax's
// numerators through glibc's own expf, eight lanes at a time, and each
// row's sum in order. Built with -ffp-contract=off: the arithmetic below
// is exactly what is written.

#include "tutti/kernels/invariant_ops.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tutti::kernels {

namespace {

// Eight keys against one query row, the arithmetic of invariant_dot for
// each: per key eight lanes of separate multiplies and adds over the head
// dimension, then the tree ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 +
// l7)), which two rounds of horizontal adds and one of halves give for
// all eight at once; then + 0 (invariant_dot's empty tail) and * scale.
// The loops over keys are unrolled so that the accumulators stay in
// registers.
__attribute__((target("avx2"))) void scores_of_eight(const float* q, int64_t hd,
                                                     const float* keys,
                                                     int64_t key_stride,
                                                     float scale, float* out) {
  __m256 acc[8];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p)
    acc[p] = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd; d += 8) {
    const __m256 qd = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p)
      acc[p] = _mm256_add_ps(
        acc[p], _mm256_mul_ps(qd, _mm256_loadu_ps(keys + p * key_stride + d)));
  }
  const __m256 h01 = _mm256_hadd_ps(acc[0], acc[1]);
  const __m256 h23 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 h45 = _mm256_hadd_ps(acc[4], acc[5]);
  const __m256 h67 = _mm256_hadd_ps(acc[6], acc[7]);
  // Lane i of each half: key order 0 1 2 3 | 4 5 6 7 after the permute.
  const __m256 h0123 = _mm256_hadd_ps(h01, h23);
  const __m256 h4567 = _mm256_hadd_ps(h45, h67);
  const __m256 low = _mm256_permute2f128_ps(h0123, h4567, 0x20);
  const __m256 high = _mm256_permute2f128_ps(h0123, h4567, 0x31);
  const __m256 dot = _mm256_add_ps(_mm256_add_ps(low, high),
                                   _mm256_setzero_ps());
  _mm256_storeu_ps(out, _mm256_mul_ps(dot, _mm256_set1_ps(scale)));
}

// `Heads` heads' 32 elements of o from d0 on, in four chains of eight
// lanes a head held in registers over all the positions; each value row
// read once for the heads.
template <int Heads>
__attribute__((target("avx2"), always_inline)) inline void weighted_values_32(
  const float* weights, int64_t weight_stride, const float* values,
  int64_t value_stride, int64_t count, int64_t hd, int64_t d0, float* o) {
  __m256 acc[Heads][4];
#pragma GCC unroll 4
  for (int h = 0; h < Heads; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c)
      acc[h][c] = _mm256_loadu_ps(o + h * hd + d0 + 8 * c);
  for (int64_t j = 0; j < count; ++j) {
    const float* v = values + j * value_stride + d0;
    const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8),
                 v2 = _mm256_loadu_ps(v + 16), v3 = _mm256_loadu_ps(v + 24);
#pragma GCC unroll 4
    for (int h = 0; h < Heads; ++h) {
      const __m256 w = _mm256_set1_ps(weights[h * weight_stride + j]);
      acc[h][0] = _mm256_add_ps(acc[h][0], _mm256_mul_ps(w, v0));
      acc[h][1] = _mm256_add_ps(acc[h][1], _mm256_mul_ps(w, v1));
      acc[h][2] = _mm256_add_ps(acc[h][2], _mm256_mul_ps(w, v2));
      acc[h][3] = _mm256_add_ps(acc[h][3], _mm256_mul_ps(w, v3));
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < Heads; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c)
      _mm256_storeu_ps(o + h * hd + d0 + 8 * c, acc[h][c]);
}

// Both drivers cover the head dimension 32 columns at a time and return
// how far they got; the columns past it are weighted_values_tail's.
__attribute__((target("avx2"))) int64_t weighted_values_avx2(
  const float* weights, int64_t weight_stride, int64_t heads,
  const float* values, int64_t value_stride, int64_t count, int64_t hd,
  float* o) {
  int64_t d0 = 0;
  for (; d0 + 32 <= hd; d0 += 32) {
    int64_t h = 0;
    for (; h + 2 <= heads; h += 2)
      weighted_values_32<2>(weights + h * weight_stride, weight_stride, values,
                            value_stride, count, hd, d0, o + h * hd);
    if (h < heads)
      weighted_values_32<1>(weights + h * weight_stride, weight_stride, values,
                            value_stride, count, hd, d0, o + h * hd);
  }
  return d0;
}

// The same on AVX-512: two registers of 16 a head's 32 outputs.
template <int Heads>
__attribute__((target("avx512f"), always_inline)) inline void
weighted_values_32_avx512(const float* weights, int64_t weight_stride,
                          const float* values, int64_t value_stride,
                          int64_t count, int64_t hd, int64_t d0, float* o) {
  __m512 acc[Heads][2];
#pragma GCC unroll 4
  for (int h = 0; h < Heads; ++h)
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c)
      acc[h][c] = _mm512_loadu_ps(o + h * hd + d0 + 16 * c);
  for (int64_t j = 0; j < count; ++j) {
    const float* v = values + j * value_stride + d0;
    const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
#pragma GCC unroll 4
    for (int h = 0; h < Heads; ++h) {
      const __m512 w = _mm512_set1_ps(weights[h * weight_stride + j]);
      acc[h][0] = _mm512_add_ps(acc[h][0], _mm512_mul_ps(w, v0));
      acc[h][1] = _mm512_add_ps(acc[h][1], _mm512_mul_ps(w, v1));
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < Heads; ++h)
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c)
      _mm512_storeu_ps(o + h * hd + d0 + 16 * c, acc[h][c]);
}

__attribute__((target("avx512f"))) int64_t weighted_values_avx512(
  const float* weights, int64_t weight_stride, int64_t heads,
  const float* values, int64_t value_stride, int64_t count, int64_t hd,
  float* o) {
  int64_t d0 = 0;
  for (; d0 + 32 <= hd; d0 += 32) {
    int64_t h = 0;
    for (; h + 4 <= heads; h += 4)
      weighted_values_32_avx512<4>(weights + h * weight_stride, weight_stride,
                                   values, value_stride, count, hd, d0,
                                   o + h * hd);
    for (; h + 2 <= heads; h += 2)
      weighted_values_32_avx512<2>(weights + h * weight_stride, weight_stride,
                                   values, value_stride, count, hd, d0,
                                   o + h * hd);
    for (; h < heads; ++h)
      weighted_values_32_avx512<1>(weights + h * weight_stride, weight_stride,
                                   values, value_stride, count, hd, d0,
                                   o + h * hd);
  }
  return d0;
}

// Columns d0 .. hd - 1 of every head, position by position.
void weighted_values_tail(const float* weights, int64_t weight_stride,
                          int64_t heads, const float* values,
                          int64_t value_stride, int64_t count, int64_t hd,
                          int64_t d0, float* o) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < count; ++j) {
      const float w = weights[h * weight_stride + j];
      for (int64_t d = d0; d < hd; ++d)
        o[h * hd + d] += w * values[j * value_stride + d];
    }
}

bool has_avx2() { return __builtin_cpu_supports("avx2"); }

} // namespace

void invariant_scores(const float* q, int64_t heads, int64_t hd,
                      const float* keys, int64_t key_stride, int64_t count,
                      float scale, float* scores, int64_t score_stride) {
  static const bool avx2 = has_avx2();
  for (int64_t h = 0; h < heads; ++h) {
    int64_t j = 0;
    if (avx2 && hd % 8 == 0)
      for (; j + 8 <= count; j += 8)
        scores_of_eight(q + h * hd, hd, keys + j * key_stride, key_stride,
                        scale, scores + h * score_stride + j);
    for (; j < count; ++j)
      scores[h * score_stride + j] = invariant_dot(q + h * hd,
                                                   keys + j * key_stride, hd)
                                     * scale;
  }
}

void invariant_weighted_values(const float* weights, int64_t weight_stride,
                               int64_t heads, const float* values,
                               int64_t value_stride, int64_t count, int64_t hd,
                               float* o) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = has_avx2();
  const int64_t done = avx512
                         ? weighted_values_avx512(weights, weight_stride, heads,
                                                  values, value_stride, count,
                                                  hd, o)
                       : avx2 ? weighted_values_avx2(weights, weight_stride,
                                                     heads, values,
                                                     value_stride, count, hd, o)
                              : 0;
  weighted_values_tail(weights, weight_stride, heads, values, value_stride,
                       count, hd, done, o);
}

namespace {

// The C library's expf as glibc computes it on a CPU with AVX2 and FMA
// (its __expf_fma, the algorithm of Arm's optimized routines): x / ln 2
// split into k / 32 + r, 2^(k/32) from a table of 32, a cubic in r, all
// in double, with fused multiply-adds where its build fused them. Four
// lanes at a time give its bits lane for lane (test_invariant_attention
// checks them against expf).
struct expf_constants {
  double inv_ln2_n = 0x1.71547652b82fep+5, shift = 0x1.8p+52;
  double c0 = 0x1.c6af84b912394p-20, c1 = 0x1.ebfce50fac4f3p-13,
         c2 = 0x1.62e42ff0c52d6p-6;
  // tab[i] = bits(2^(i/32)) - (i << 47), so that 2^(k/32) is the double
  // whose bits are tab[k % 32] + (k << 47).
  int64_t tab[32];
  expf_constants() {
    for (int i = 0; i < 32; ++i) {
      const double v = static_cast<double>(std::exp2l(i / 32.0L));
      int64_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      tab[i] = bits - (int64_t{i} << 47);
    }
  }
};

__attribute__((target("avx2,fma"))) __m256d expf_of_doubles(
  __m256d x, const expf_constants& c) {
  const __m256d inv = _mm256_set1_pd(c.inv_ln2_n);
  const __m256d shift = _mm256_set1_pd(c.shift);
  const __m256d kd_shifted = _mm256_fmadd_pd(inv, x, shift);
  const __m256i k = _mm256_castpd_si256(kd_shifted);
  const __m256d kd = _mm256_sub_pd(kd_shifted, shift);
  const __m256d r = _mm256_fmsub_pd(inv, x, kd);
  const __m256i t = _mm256_add_epi64(
    _mm256_i64gather_epi64(reinterpret_cast<const long long*>(c.tab),
                           _mm256_and_si256(k, _mm256_set1_epi64x(31)), 8),
    _mm256_slli_epi64(k, 47));
  const __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(c.c0),
                                    _mm256_set1_pd(c.c1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(c.c2), _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(z, r2, y);
  return _mm256_mul_pd(y, _mm256_castsi256_pd(t));
}

// s[j] = expf(s[j] - mx) on eight lanes, and whether it could: a lane of
// magnitude 88 or more (or a NaN) takes expf's special cases, left to it.
__attribute__((target("avx2,fma"))) bool expf_of_eight(
  float* s, float mx, const expf_constants& c) {
  const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s), _mm256_set1_ps(mx));
  const __m256i top = _mm256_and_si256(
    _mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
  if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a))))
    return false;
  const __m128 low = _mm256_cvtpd_ps(
    expf_of_doubles(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), c));
  const __m128 high = _mm256_cvtpd_ps(
    expf_of_doubles(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), c));
  _mm256_storeu_ps(s, _mm256_set_m128(high, low));
  return true;
}

// A row's largest score (a maximum is exact in any order, and a zero's
// sign does not change a numerator).
__attribute__((target("avx2"))) float row_max_avx2(const float* s, int64_t n) {
  float mx = s[0];
  int64_t j = 0;
  if (n >= 8) {
    __m256 top = _mm256_loadu_ps(s);
    for (j = 8; j + 8 <= n; j += 8)
      top = _mm256_max_ps(top, _mm256_loadu_ps(s + j));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, top);
    for (float v : lanes)
      mx = v > mx ? v : mx;
  }
  for (; j < n; ++j)
    mx = s[j] > mx ? s[j] : mx;
  return mx;
}

// Eight rows' sums, each in order: lane r adds row r's scores one by one.
__attribute__((target("avx2"))) void sums_of_eight_rows(const float* s,
                                                        int64_t n,
                                                        int64_t stride,
                                                        float* sums) {
  const __m256i rows = _mm256_mullo_epi32(
    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    _mm256_set1_epi32(static_cast<int>(stride)));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j)
    acc = _mm256_add_ps(acc, _mm256_i32gather_ps(s + j, rows, 4));
  _mm256_storeu_ps(sums, acc);
}

} // namespace

void invariant_softmax_numerators(float* s, int64_t rows, int64_t n,
                                  int64_t stride, float* sums) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool vector = avx2 && __builtin_cpu_supports("fma");
  static const expf_constants constants;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * stride;
    float mx = row[0];
    if (avx2)
      mx = row_max_avx2(row, n);
    else
      for (int64_t j = 1; j < n; ++j)
        mx = row[j] > mx ? row[j] : mx;
    // expf of each score less it, eight at a time where the CPU has what
    // glibc's own expf runs on.
    int64_t j = 0;
    if (vector)
      while (j + 8 <= n && expf_of_eight(row + j, mx, constants))
        j += 8;
    for (; j < n; ++j)
      row[j] = std::exp(row[j] - mx);
  }
  // Each row's sum in order (which fixes the bits); rows side by side, so
  // that their additions overlap.
  int64_t r0 = 0;
  if (avx2 && stride <= (int64_t{1} << 27))
    for (; r0 + 8 <= rows; r0 += 8)
      sums_of_eight_rows(s + r0 * stride, n, stride, sums + r0);
  for (int64_t r = r0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j)
      sum += s[r * stride + j];
    sums[r] = sum;
  }
}

} // namespace tutti::kernels
