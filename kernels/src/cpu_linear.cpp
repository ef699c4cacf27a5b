// Dense and grouped (per-expert) linear layers on OpenBLAS, or on oneDNN's
// bf16 matmul under gemm_precision::bf16 where the CPU has bf16 units.
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

// gemm, or its bf16 form when the stream asks for it and the CPU runs it.
template <class T>
void product(const stream& s, bool ta, bool tb, int64_t m, int64_t n,
             int64_t kk, const T* a, int64_t lda, const T* b, int64_t ldb,
             T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (s.gemm == gemm_precision::bf16 && cpu_bf16_support().runs_bf16)
      return detail::gemm_bf16(ta, tb, m, n, kk, a, lda, b, ldb, beta, c, ldc);
  detail::gemm(ta, tb, m, n, kk, T(1), a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void linear_forward(const stream& s, const T* x, const T* w, T* y, int64_t m,
                    int64_t k, int64_t n) {
  // y[m,n] = x[m,k] * w[n,k]^T
  product(s, false, true, m, n, k, x, k, w, k, T(0), y, n);
}

template <class T>
void linear_backward(const stream& s, const T* x, const T* w, const T* dy,
                     T* dx, T* dw, int64_t m, int64_t k, int64_t n) {
  // dx[m,k] = dy[m,n] * w[n,k]   (overwrite; skipped for the first layer)
  if (dx != nullptr)
    product(s, false, false, m, k, n, dy, n, w, k, T(0), dx, k);
  // dw[n,k] += dy^T[n,m] * x[m,k]   (beta = 1: weight grads accumulate)
  product(s, true, false, n, k, m, dy, n, x, k, T(1), dw, k);
}

template <class T>
void linear_input_grad(const stream& s, const T* w, const T* dy, T* dx,
                       int64_t m, int64_t k, int64_t n, bool accumulate) {
  product(s, false, false, m, k, n, dy, n, w, k, accumulate ? T(1) : T(0), dx,
          k);
}

template <class T>
void linear_weight_grad_rows(const stream& s, const T* x, const T* dy, T* dw,
                             int64_t m, int64_t k, int64_t n, int64_t first,
                             int64_t count) {
  // dw[first.., k] += dy[:, first..]^T x: dy's columns read in place (lda n).
  product(s, true, false, count, k, m, dy + first, n, x, k, T(1),
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
