#include "tutti/kernels/invariant_ops.hpp"

#include "tutti/kernels/ops.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

// The lanes never cross a function boundary (everything below inlines), so
// GCC's note that AVX-sized vector returns change the ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tutti::kernels {

namespace {

// Eight float lanes; GCC lowers it to the widest vectors the target has,
// and the lanes' arithmetic is the same either way.
typedef float lanes8 __attribute__((vector_size(32)));

inline lanes8 load8(const float* p) {
  lanes8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float reduce(lanes8 v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

} // namespace

float invariant_dot(const float* a, const float* b, int64_t n) {
  lanes8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    acc += load8(a + i) * load8(b + i);
  float tail = 0.0f;
  for (; i < n; ++i)
    tail += a[i] * b[i];
  return reduce(acc) + tail;
}

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

__attribute__((target("avx2"))) void weighted_values_avx2(
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
  static const bool avx2 = has_avx2();
  if (avx2) {
    weighted_values_avx2(weights, weight_stride, heads, values, value_stride,
                         count, hd, o);
    return;
  }
  for (int64_t j = 0; j < count; ++j)
    for (int64_t h = 0; h < heads; ++h) {
      const float w = weights[h * weight_stride + j];
      for (int64_t d = 0; d < hd; ++d)
        o[h * hd + d] += w * values[j * value_stride + d];
    }
}

#if defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
float invariant_softmax_numerators(float* s, int64_t n) {
  // The largest score, eight lanes at a time (a maximum is exact in any
  // order).
  float mx = s[0];
  int64_t j = 0;
  if (n >= 8) {
    lanes8 top = load8(s);
    for (j = 8; j + 8 <= n; j += 8) {
      const lanes8 v = load8(s + j);
      top = v > top ? v : top;
    }
    for (int l = 0; l < 8; ++l)
      mx = top[l] > mx ? top[l] : mx;
  }
  for (; j < n; ++j)
    mx = s[j] > mx ? s[j] : mx;
  // Then in order, through the C library's expf: the served bits are
  // those recorded (tests/model/medium_bits.json) on every machine.
  float sum = 0.0f;
  for (j = 0; j < n; ++j) {
    const float e = std::exp(s[j] - mx);
    s[j] = e;
    sum += e;
  }
  return sum;
}

void rope_at_positions(float* x, const int64_t* positions, int64_t rows,
                       int64_t heads, int64_t head_dim, double theta) {
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(half), cs(half), sn(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0 * double(i) / double(head_dim));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(positions[r]) * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (r * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double x1 = v[i], x2 = v[i + half];
        v[i] = float(x1 * cs[i] - x2 * sn[i]);
        v[i + half] = float(x2 * cs[i] + x1 * sn[i]);
      }
    }
  }
}

void invariant_expert(const float* x, const packed_matrix& w13,
                      const packed_matrix& w2, float* y, int64_t m,
                      std::vector<float>& ab, std::vector<float>& h) {
  const int64_t F = w2.in;
  ab.resize(m * 2 * F);
  h.resize(m * F);
  packed_gemm(x, w13, ab.data(), m);
  const auto cpu = kernels::cpu_stream();
  for (int64_t i = 0; i < m; ++i)
    kernels::swiglu_forward<float>(cpu, ab.data() + i * 2 * F,
                                   ab.data() + i * 2 * F + F, h.data() + i * F,
                                   F);
  packed_gemm(h.data(), w2, y, m);
}

} // namespace tutti::kernels
