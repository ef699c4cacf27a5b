#pragma once
// Internal to the CPU backend: one gemm name for float and double so the
// templated kernels can call BLAS without per-type branches.

#include <cblas.h>

#include <cstdint>
#include <type_traits>

namespace tutti::kernels::detail {

// C[m,n] = alpha * op(A)[m,kk] * op(B)[kk,n] + beta * C, row-major, for
// T = float (cblas_sgemm) or double (cblas_dgemm). Degenerate sizes are
// handled here because OpenBLAS rejects some zero-extent leading dimensions
// with an error message instead of a no-op.
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t kk, T alpha,
          const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
          int64_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  if (m == 0 || n == 0)
    return;
  if (kk == 0) {
    // Nothing to multiply: C = beta * C (beta is 0 or 1 in this backend).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  const auto order = CblasRowMajor;
  const auto op_a = ta ? CblasTrans : CblasNoTrans;
  const auto op_b = tb ? CblasTrans : CblasNoTrans;
  const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n),
             K = static_cast<blasint>(kk), LDA = static_cast<blasint>(lda),
             LDB = static_cast<blasint>(ldb), LDC = static_cast<blasint>(ldc);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(order, op_a, op_b, M, N, K, alpha, a, LDA, b, LDB, beta, c,
                LDC);
  else
    cblas_dgemm(order, op_a, op_b, M, N, K, alpha, a, LDA, b, LDB, beta, c,
                LDC);
}

// bf16 products through oneDNN (cpu_bf16_gemm.cpp): the same contract as
// gemm<float>, alpha 1, with A and B rounded to bfloat16 and float32
// accumulation. Only where cpu_bf16_support().runs_bf16 (stream.hpp).
// Rounds `rows` rows of `cols` floats (`ld` apart) to bfloat16, into rows
// `dst_ld` apart (cpu_bf16_round_avx512.cpp; AVX512-BF16 only).
void round_rows_to_bf16(const float* src, int64_t rows, int64_t cols,
                        int64_t ld, uint16_t* dst, int64_t dst_ld);
void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t kk,
               const float* a, int64_t lda, const float* b, int64_t ldb,
               float beta, float* c, int64_t ldc);

} // namespace tutti::kernels::detail
