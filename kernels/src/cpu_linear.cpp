// Dense and grouped (per-expert) linear layers on OpenBLAS.
//
// Every product goes through cblas_?gemm with row-major layout. With BLAS
// pinned to one thread (use_single_threaded_blas) the blocking and the
// summation order depend only on the sizes, so results are reproducible.

#include "backends.hpp"

#include <cblas.h>

#include "cpu_blas.hpp"
#include "tutti/kernels/blas_core.hpp"

namespace tutti::kernels {

namespace {
// Before main(), in every program that runs these kernels: OpenBLAS's
// kernels are chosen for the whole process at load time (blas_core.hpp).
const bool blas_core_selected = (select_blas_core(), true);
} // namespace

// Device-independent (stream.hpp): it configures the CPU backend only.
void use_single_threaded_blas() { openblas_set_num_threads(1); }

} // namespace tutti::kernels

namespace tutti::kernels::cpu {

using detail::gemm;

template <class T>
void linear_forward(const stream&, const T* x, const T* w, T* y, int64_t m,
                    int64_t k, int64_t n) {
  // y[m,n] = x[m,k] * w[n,k]^T
  gemm(false, true, m, n, k, T(1), x, k, w, k, T(0), y, n);
}

template <class T>
void linear_backward(const stream&, const T* x, const T* w, const T* dy, T* dx,
                     T* dw, int64_t m, int64_t k, int64_t n) {
  // dx[m,k] = dy[m,n] * w[n,k]   (overwrite; skipped for the first layer)
  if (dx != nullptr)
    gemm(false, false, m, k, n, T(1), dy, n, w, k, T(0), dx, k);
  // dw[n,k] += dy^T[n,m] * x[m,k]   (beta = 1: weight grads accumulate)
  gemm(true, false, n, k, m, T(1), dy, n, x, k, T(1), dw, k);
}

template <class T>
void linear_input_grad(const stream&, const T* w, const T* dy, T* dx,
                       int64_t m, int64_t k, int64_t n, bool accumulate) {
  gemm(false, false, m, k, n, T(1), dy, n, w, k, accumulate ? T(1) : T(0), dx,
       k);
}

template <class T>
void linear_weight_grad_rows(const stream&, const T* x, const T* dy, T* dw,
                             int64_t m, int64_t k, int64_t n, int64_t first,
                             int64_t count) {
  // dw[first.., k] += dy[:, first..]^T x: dy's columns read in place (lda n).
  gemm(true, false, count, k, m, T(1), dy + first, n, x, k, T(1),
       dw + first * k, k);
}

template <class T>
void grouped_linear_forward(const stream& s, const T* x, const T* w,
                            const int64_t* rows, int64_t groups, T* y,
                            int64_t k, int64_t n) {
  int64_t offset = 0;
  for (int64_t g = 0; g < groups; ++g) {
    // Experts that received no rows are common; gemm skips m == 0.
    cpu::linear_forward(s, x + offset * k, w + g * n * k, y + offset * n,
                        rows[g], k, n);
    offset += rows[g];
  }
}

template <class T>
void grouped_linear_backward(const stream& s, const T* x, const T* w,
                             const T* dy, const int64_t* rows, int64_t groups,
                             T* dx, T* dw, int64_t k, int64_t n) {
  int64_t offset = 0;
  for (int64_t g = 0; g < groups; ++g) {
    cpu::linear_backward(s, x + offset * k, w + g * n * k, dy + offset * n,
                         dx != nullptr ? dx + offset * k : nullptr,
                         dw + g * n * k, rows[g], k, n);
    offset += rows[g];
  }
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_LINEAR
#include "instantiate_ops.inc"

} // namespace tutti::kernels::cpu
