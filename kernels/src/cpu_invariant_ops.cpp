#include "tutti/kernels/invariant_ops.hpp"

#include "tutti/kernels/ops.hpp"

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

void rope_at_positions(float* q, int64_t q_heads, float* k, int64_t k_heads,
                       const int64_t* positions, int64_t rows, int64_t head_dim,
                       double theta) {
  const int64_t half = head_dim / 2;
  thread_local std::vector<double> inv_freq, cs, sn;
  inv_freq.resize(half);
  cs.resize(half);
  sn.resize(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0 * double(i) / double(head_dim));
  auto rotate = [&](float* x, int64_t heads, int64_t r) {
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (r * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double x1 = v[i], x2 = v[i + half];
        v[i] = float(x1 * cs[i] - x2 * sn[i]);
        v[i + half] = float(x2 * cs[i] + x1 * sn[i]);
      }
    }
  };
  // A row's angles once, for its query and its key heads.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(positions[r]) * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
    }
    rotate(q, q_heads, r);
    rotate(k, k_heads, r);
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
