#include "tutti/kernels/packed_gemm.hpp"

#include <cmath>
#include <type_traits>

#include "backends.hpp"

namespace tutti::kernels {

// cpu_packed_gemm_avx512.cpp and cpu_packed_gemm_avx2.cpp
void packed_gemm_avx512(const float* x, int64_t ldx, const float* wt,
                        int64_t n, int64_t k, float* y, int64_t ldy,
                        int64_t m);
void packed_gemm_avx2(const float* x, int64_t ldx, const float* wt, int64_t n,
                      int64_t k, float* y, int64_t ldy, int64_t m);
// cpu_int8_gemm.cpp: the same product for an int8 matrix.
void int8_gemm(const float* x, int64_t ldx, const packed_matrix& w, float* y,
               int64_t ldy, int64_t m);
// cpu_int8_dot_gemm.cpp: an int8 matrix times int8 rows.
void int8_dot_gemm(const float* x, int64_t ldx, const packed_matrix& w,
                   float* y, int64_t ldy, int64_t m);
// cpu_bf16_packed_gemm.cpp: and for a bfloat16 one.
void bf16_gemm(const float* x, int64_t ldx, const packed_matrix& w, float* y,
               int64_t ldy, int64_t m);

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

// Without AVX2 and FMA: the same chains of fused multiply-adds one output
// at a time (std::fma rounds once, as the instruction does), so the bits
// are those of the vector kernels; far slower (a library call an
// element), and only for CPUs without them (and for double).
template <class T>
void packed_gemm_portable(const T* x, int64_t ldx, const T* wt, int64_t n,
                          int64_t k, T* y, int64_t ldy, int64_t m) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T acc = T(0);
      for (int64_t t = 0; t < k; ++t)
        acc = std::fma(wt[t * n + j], x[i * ldx + t], acc);
      y[i * ldy + j] = acc;
    }
}

void packed_gemm_float(const float* x, int64_t ldx, const float* wt,
                       int64_t n, int64_t k, float* y, int64_t ldy,
                       int64_t m) {
  static const auto kernel = !__builtin_cpu_supports("fma")
                               ? packed_gemm_portable<float>
                             : __builtin_cpu_supports("avx512f")
                               ? packed_gemm_avx512
                             : __builtin_cpu_supports("avx2")
                               ? packed_gemm_avx2
                               : packed_gemm_portable<float>;
  if (m > 0)
    kernel(x, ldx, wt, n, k, y, ldy, m);
}

} // namespace

void packed_gemm_portable_float(const float* x, int64_t ldx,
                                const packed_matrix& w, float* y, int64_t ldy,
                                int64_t m) {
  packed_gemm_portable(x, ldx, w.t.data(), w.out, w.in, y, ldy, m);
}

void packed_gemm(const float* x, int64_t ldx, const packed_matrix& w, float* y,
                 int64_t ldy, int64_t m) {
  if (w.is_int8_dot())
    return int8_dot_gemm(x, ldx, w, y, ldy, m);
  if (w.is_int8())
    return int8_gemm(x, ldx, w, y, ldy, m);
  if (w.is_bf16())
    return bf16_gemm(x, ldx, w, y, ldy, m);
  packed_gemm_float(x, ldx, w.t.data(), w.out, w.in, y, ldy, m);
}

// The routed op (op_list.inc): packed_gemm on the CPU backend.
namespace cpu {

template <class T>
void invariant_linear_forward(const stream&, const T* x, int64_t ldx,
                              const T* wt, T* y, int64_t ldy, int64_t m,
                              int64_t k, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    packed_gemm_float(x, ldx, wt, n, k, y, ldy, m);
  else
    packed_gemm_portable(x, ldx, wt, n, k, y, ldy, m);
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_INVARIANT
#include "instantiate_ops.inc"

} // namespace cpu

} // namespace tutti::kernels
