// Dense and grouped (per-expert) linear layers on cuBLAS.
//
// Every product is one cublasGemmEx on row-major data, mirroring the CPU's
// detail::gemm: a row-major C = op(A) op(B) is the column-major
// C^T = op(B)^T op(A)^T, so the operands swap and nothing is transposed in
// memory. fp32 runs with CUBLAS_COMPUTE_32F and default math (no TF32);
// under gemm_precision::bf16 the inputs are first rounded to bf16 copies in
// scratch memory and the tensor cores accumulate in fp32 into fp32 outputs,
// so weights stay fp32 masters and weight gradients accumulate in fp32.
//
// The grouped GEMM is a loop of cuBLAS calls on the stream, one per expert
// with rows: simple and correct first; bench/gpu_bench measures what it
// costs against one GEMM of the same FLOPs.

#include <cuda_bf16.h>

#include <algorithm>
#include <vector>

#include "cuda_common.cuh"

namespace tutti::kernels::cuda {
namespace {

// How cuBLAS sees the GEMM inputs and outputs of T under s.gemm.
struct gemm_kind {
  cudaDataType in;
  cudaDataType out;
  cublasComputeType_t compute;
  int64_t in_bytes;
  bool to_bf16;
};

template <class T>
gemm_kind kind_for(const stream& s);

template <>
gemm_kind kind_for<float>(const stream& s) {
  if (s.gemm == gemm_precision::bf16)
    return {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, 2, true};
  return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 4, false};
}

template <>
gemm_kind kind_for<double>(const stream&) {
  return {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, 8, false};
}

__global__ void round_to_bf16(const float* x, __nv_bfloat16* y, int64_t n) {
  TUTTI_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

template <class T>
__global__ void scale_matrix(T* c, int64_t m, int64_t n, int64_t ldc, T beta) {
  TUTTI_GRID_STRIDE(i, m * n) {
    T& v = c[(i / n) * ldc + i % n];
    v = beta == T(0) ? T(0) : beta * v;
  }
}

// The op's GEMM inputs as cuBLAS reads them: the arrays themselves, or their
// bf16 copies (one scratch request for all of them).
template <class T, int N>
struct gemm_inputs {
  gemm_kind kind;
  const void* ptr[N];

  gemm_inputs(const stream& s, const T* const (&arrays)[N],
              const int64_t (&counts)[N])
    : kind(kind_for<T>(s)) {
    for (int i = 0; i < N; ++i)
      ptr[i] = arrays[i];
    if (!kind.to_bf16)
      return;
    carver size;
    for (int i = 0; i < N; ++i)
      size.take<__nv_bfloat16>(counts[i]);
    carver cut(scratch(s, size.bytes()));
    for (int i = 0; i < N; ++i) {
      __nv_bfloat16* out = cut.take<__nv_bfloat16>(counts[i]);
      ptr[i] = out;
      if (arrays[i] == nullptr || counts[i] == 0)
        continue;
      round_to_bf16<<<grid_for(counts[i]), kThreads, 0, raw(s)>>>(
        reinterpret_cast<const float*>(arrays[i]), out, counts[i]);
      TUTTI_CUDA_LAUNCH_CHECK();
    }
  }

  // Input i, `elems` elements in.
  const void* at(int i, int64_t elems) const {
    return static_cast<const char*>(ptr[i]) + elems * kind.in_bytes;
  }
};

// Row-major C[m,n] = alpha * op(A)[m,kk] * op(B)[kk,n] + beta * C.
template <class T>
void gemm(const stream& s, const gemm_kind& g, bool ta, bool tb, int64_t m,
          int64_t n, int64_t kk, T alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (kk == 0) {
    // Nothing to multiply: C = beta * C, as on the CPU (beta is 0 or 1).
    if (beta == T(1))
      return;
    scale_matrix<<<grid_for(m * n), kThreads, 0, raw(s)>>>(c, m, n, ldc, beta);
    TUTTI_CUDA_LAUNCH_CHECK();
    return;
  }
  TUTTI_CUBLAS_CHECK(cublas().gemm_ex(
    blas_handle(s), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
    ta ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(n, "gemm n"), as_int(m, "gemm m"),
    as_int(kk, "gemm k"), &alpha, b, g.in, as_int(ldb, "gemm ldb"), a, g.in,
    as_int(lda, "gemm lda"), &beta, c, g.out, as_int(ldc, "gemm ldc"),
    g.compute, CUBLAS_GEMM_DEFAULT));
}

// grouped_linear's `rows` may be host or device memory (ops.hpp).
std::vector<int64_t> rows_on_host(const stream& s, const int64_t* rows,
                                  int64_t groups) {
  std::vector<int64_t> h(static_cast<size_t>(groups));
  if (groups == 0)
    return h;
  cudaPointerAttributes attr{};
  TUTTI_CUDA_CHECK(cudaPointerGetAttributes(&attr, rows));
  if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) {
    TUTTI_CUDA_CHECK(cudaMemcpyAsync(h.data(), rows, sizeof(int64_t) * groups,
                                     cudaMemcpyDeviceToHost, raw(s)));
    TUTTI_CUDA_CHECK(cudaStreamSynchronize(raw(s)));
  } else {
    std::copy(rows, rows + groups, h.begin());
  }
  return h;
}

int64_t total(const std::vector<int64_t>& rows) {
  int64_t t = 0;
  for (int64_t r : rows)
    t += r;
  return t;
}

} // namespace

template <class T>
void linear_forward(const stream& s, const T* x, const T* w, T* y, int64_t m,
                    int64_t k, int64_t n) {
  const gemm_inputs<T, 2> in(s, {x, w}, {m * k, n * k});
  // y[m,n] = x[m,k] * w[n,k]^T
  gemm(s, in.kind, false, true, m, n, k, T(1), in.ptr[0], k, in.ptr[1], k, T(0),
       y, n);
}

template <class T>
void linear_backward(const stream& s, const T* x, const T* w, const T* dy,
                     T* dx, T* dw, int64_t m, int64_t k, int64_t n) {
  const gemm_inputs<T, 3> in(s, {x, w, dy}, {m * k, n * k, m * n});
  // dx[m,k] = dy[m,n] * w[n,k] (overwrite); dw[n,k] += dy^T x (beta = 1).
  if (dx != nullptr)
    gemm(s, in.kind, false, false, m, k, n, T(1), in.ptr[2], n, in.ptr[1], k,
         T(0), dx, k);
  gemm(s, in.kind, true, false, n, k, m, T(1), in.ptr[2], n, in.ptr[0], k, T(1),
       dw, k);
}

template <class T>
void linear_input_grad(const stream& s, const T* w, const T* dy, T* dx,
                       int64_t m, int64_t k, int64_t n, bool accumulate) {
  const gemm_inputs<T, 2> in(s, {w, dy}, {n * k, m * n});
  gemm(s, in.kind, false, false, m, k, n, T(1), in.ptr[1], n, in.ptr[0], k,
       accumulate ? T(1) : T(0), dx, k);
}

template <class T>
void linear_weight_grad_rows(const stream& s, const T* x, const T* dy, T* dw,
                             int64_t m, int64_t k, int64_t n, int64_t first,
                             int64_t count) {
  const gemm_inputs<T, 2> in(s, {x, dy}, {m * k, m * n});
  gemm(s, in.kind, true, false, count, k, m, T(1), in.at(1, first), n,
       in.ptr[0], k, T(1), dw + first * k, k);
}

template <class T>
void grouped_linear_forward(const stream& s, const T* x, const T* w,
                            const int64_t* rows, int64_t groups, T* y,
                            int64_t k, int64_t n) {
  const std::vector<int64_t> r = rows_on_host(s, rows, groups);
  const int64_t m = total(r);
  const gemm_inputs<T, 2> in(s, {x, w}, {m * k, groups * n * k});
  int64_t offset = 0;
  for (int64_t g = 0; g < groups; ++g) {
    // Experts that received no rows are common; gemm skips m == 0.
    gemm(s, in.kind, false, true, r[g], n, k, T(1), in.at(0, offset * k), k,
         in.at(1, g * n * k), k, T(0), y + offset * n, n);
    offset += r[g];
  }
}

template <class T>
void grouped_linear_backward(const stream& s, const T* x, const T* w,
                             const T* dy, const int64_t* rows, int64_t groups,
                             T* dx, T* dw, int64_t k, int64_t n) {
  const std::vector<int64_t> r = rows_on_host(s, rows, groups);
  const int64_t m = total(r);
  const gemm_inputs<T, 3> in(s, {x, w, dy}, {m * k, groups * n * k, m * n});
  int64_t offset = 0;
  for (int64_t g = 0; g < groups; ++g) {
    if (dx != nullptr)
      gemm(s, in.kind, false, false, r[g], k, n, T(1), in.at(2, offset * n), n,
           in.at(1, g * n * k), k, T(0), dx + offset * k, k);
    gemm(s, in.kind, true, false, n, k, r[g], T(1), in.at(2, offset * n), n,
         in.at(0, offset * k), k, T(1), dw + g * n * k, k);
    offset += r[g];
  }
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_LINEAR
#include "../instantiate_ops.inc"

} // namespace tutti::kernels::cuda
