#pragma once
// Internal to the CPU backend: one gemm name for float and double so the
// templated kernels can call BLAS without per-type branches.

#include <cblas.h>

#include <cstdint>

namespace tutti::kernels::detail {

// C[m,n] = alpha * op(A)[m,kk] * op(B)[kk,n] + beta * C, row-major.
// Degenerate sizes are handled here because OpenBLAS rejects some
// zero-extent leading dimensions with an error message instead of a no-op.
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t kk,
                 float alpha, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (kk == 0) {
    // Nothing to multiply: C = beta * C (beta is 0 or 1 in this backend).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(kk), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t kk,
                 double alpha, const double* a, int64_t lda, const double* b,
                 int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (kk == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0.0 ? 0.0 : beta * c[i * ldc + j];
    return;
  }
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(kk), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

} // namespace tutti::kernels::detail
