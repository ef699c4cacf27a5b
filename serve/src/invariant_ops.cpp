#include "tutti/serve/invariant_ops.hpp"

#include "tutti/kernels/ops.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

// The lanes never cross a function boundary (everything below inlines), so
// GCC's note that AVX-sized vector returns change the ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12 takes the deliberately undefined upper half in its own AVX-512
// intrinsics (_mm512_undefined_pd) for a use of an uninitialised value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tutti::serve {

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

// Four outputs of one row at once: y[j] = invariant_dot(x, w_j, k) for the
// four rows w_j, each with its own accumulator and the very same operations
// in the same order as invariant_dot, so the bits do not change; the four
// independent chains only keep the adder busy.
inline void dot4(const float* x, const float* w0, const float* w1,
                 const float* w2, const float* w3, int64_t k, float* y) {
  lanes8 a0 = {0, 0, 0, 0, 0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const lanes8 xv = load8(x + i);
    a0 += xv * load8(w0 + i);
    a1 += xv * load8(w1 + i);
    a2 += xv * load8(w2 + i);
    a3 += xv * load8(w3 + i);
  }
  float t0 = 0.0f, t1 = 0.0f, t2 = 0.0f, t3 = 0.0f;
  for (; i < k; ++i) {
    t0 += x[i] * w0[i];
    t1 += x[i] * w1[i];
    t2 += x[i] * w2[i];
    t3 += x[i] * w3[i];
  }
  y[0] = reduce(a0) + t0;
  y[1] = reduce(a1) + t1;
  y[2] = reduce(a2) + t2;
  y[3] = reduce(a3) + t3;
}

} // namespace

namespace {

// Built twice: for AVX2 where the CPU has it, and for the baseline. AVX2
// without FMA does the same single-precision multiplies and adds, lane by
// lane, so both give the same bits; the wider registers only halve the
// instructions. (The file is compiled with -ffp-contract=off: no clone may
// fuse a multiply and an add.)
__attribute__((target_clones("avx2", "default"))) void linear_rows(
  const float* x, const float* w, float* y, int64_t m, int64_t k, int64_t n) {
  // Tiles of w rows stay in cache while every x row passes over them; the
  // tiling changes the order of whole dot products, never their insides.
  constexpr int64_t tile = 16;
  for (int64_t j0 = 0; j0 < n; j0 += tile) {
    const int64_t j1 = std::min(n, j0 + tile);
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * k;
      float* yi = y + i * n;
      int64_t j = j0;
      for (; j + 4 <= j1; j += 4)
        dot4(xi, w + j * k, w + (j + 1) * k, w + (j + 2) * k, w + (j + 3) * k,
             k, yi + j);
      for (; j < j1; ++j)
        yi[j] = invariant_dot(xi, w + j * k, k);
    }
  }
}

// Two rows at once in 16-lane (AVX-512) registers: lanes 0-7 are row a's
// eight lanes, 8-15 row b's, each with exactly the multiplies and adds of
// dot4 in the same order, so every output keeps its bits; one instruction
// now does two rows' work, and each weight load serves both.
__attribute__((target("avx512f"))) inline __m512 pair(const float* a,
                                                      const float* b) {
  return _mm512_castpd_ps(_mm512_insertf64x4(
    _mm512_castpd256_pd512(_mm256_loadu_pd(reinterpret_cast<const double*>(a))),
    _mm256_loadu_pd(reinterpret_cast<const double*>(b)), 1));
}

__attribute__((target("avx512f"))) inline __m512 twice(const float* w) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(
    _mm256_loadu_pd(reinterpret_cast<const double*>(w))));
}

// Row a's and row b's sums of one accumulator, as reduce() takes them.
__attribute__((target("avx512f"))) inline void finish(__m512 acc, float ta,
                                                      float tb, float& ya,
                                                      float& yb) {
  lanes8 lo, hi;
  const __m256 l = _mm512_castps512_ps256(acc);
  const __m256 h = _mm256_castpd_ps(
    _mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  std::memcpy(&lo, &l, sizeof lo);
  std::memcpy(&hi, &h, sizeof hi);
  ya = reduce(lo) + ta;
  yb = reduce(hi) + tb;
}

__attribute__((target("avx512f"))) void dot4x2(const float* xa, const float* xb,
                                               const float* w0, const float* w1,
                                               const float* w2, const float* w3,
                                               int64_t k, float* ya,
                                               float* yb) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m512 xv = pair(xa + i, xb + i);
    a0 = _mm512_add_ps(a0, _mm512_mul_ps(xv, twice(w0 + i)));
    a1 = _mm512_add_ps(a1, _mm512_mul_ps(xv, twice(w1 + i)));
    a2 = _mm512_add_ps(a2, _mm512_mul_ps(xv, twice(w2 + i)));
    a3 = _mm512_add_ps(a3, _mm512_mul_ps(xv, twice(w3 + i)));
  }
  float ta[4] = {0, 0, 0, 0}, tb[4] = {0, 0, 0, 0};
  const float* wr[4] = {w0, w1, w2, w3};
  for (int c = 0; c < 4; ++c)
    for (int64_t t = i; t < k; ++t) {
      ta[c] += xa[t] * wr[c][t];
      tb[c] += xb[t] * wr[c][t];
    }
  finish(a0, ta[0], tb[0], ya[0], yb[0]);
  finish(a1, ta[1], tb[1], ya[1], yb[1]);
  finish(a2, ta[2], tb[2], ya[2], yb[2]);
  finish(a3, ta[3], tb[3], ya[3], yb[3]);
}

__attribute__((target("avx512f"))) void linear_row_pairs(const float* x,
                                                         const float* w,
                                                         float* y, int64_t m,
                                                         int64_t k, int64_t n) {
  constexpr int64_t tile = 16;
  for (int64_t j0 = 0; j0 < n; j0 += tile) {
    const int64_t j1 = std::min(n, j0 + tile);
    int64_t i = 0;
    for (; i + 2 <= m; i += 2) {
      const float* xa = x + i * k;
      const float* xb = xa + k;
      float* ya = y + i * n;
      float* yb = ya + n;
      int64_t j = j0;
      for (; j + 4 <= j1; j += 4)
        dot4x2(xa, xb, w + j * k, w + (j + 1) * k, w + (j + 2) * k,
               w + (j + 3) * k, k, ya + j, yb + j);
      for (; j < j1; ++j) {
        ya[j] = invariant_dot(xa, w + j * k, k);
        yb[j] = invariant_dot(xb, w + j * k, k);
      }
    }
    for (; i < m; ++i) {
      const float* xi = x + i * k;
      float* yi = y + i * n;
      int64_t j = j0;
      for (; j + 4 <= j1; j += 4)
        dot4(xi, w + j * k, w + (j + 1) * k, w + (j + 2) * k, w + (j + 3) * k,
             k, yi + j);
      for (; j < j1; ++j)
        yi[j] = invariant_dot(xi, w + j * k, k);
    }
  }
}

} // namespace

void invariant_linear(const float* x, const float* w, float* y, int64_t m,
                      int64_t k, int64_t n) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (m >= 2 && avx512)
    linear_row_pairs(x, w, y, m, k, n);
  else
    linear_rows(x, w, y, m, k, n);
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

void invariant_expert(const float* x, const float* w1, const float* w3,
                      const float* w2, float* y, int64_t m, int64_t hidden,
                      int64_t intermediate, std::vector<float>& a,
                      std::vector<float>& b, std::vector<float>& h) {
  const int64_t D = hidden, F = intermediate;
  a.resize(m * F);
  b.resize(m * F);
  h.resize(m * F);
  invariant_linear(x, w1, a.data(), m, D, F);
  invariant_linear(x, w3, b.data(), m, D, F);
  kernels::swiglu_forward<float>(kernels::cpu_stream(), a.data(), b.data(),
                                 h.data(), m * F);
  invariant_linear(h.data(), w2, y, m, F, D);
}

} // namespace tutti::serve
