// The batch-invariant GEMM on CUDA: y[m,n] = x[m,k] * wt[k,n], each output
// one chain of fused multiply-adds over k, left to right from zero, exactly
// as the CPU's packed_gemm computes it (cpu_packed_gemm*.cpp). A fused
// multiply-add rounds once on both (IEEE fma), so the bits match the CPU's
// and do not depend on m, on the block a row falls in, nor on the GPU's
// scheduling. cuBLAS cannot promise this: it picks its algorithm (split-k,
// tile shape, tensor-core path) by the matrix sizes, i.e. by the batch.
//
// Tiles: a block computes 16 rows x 64 outputs, staging kChunk steps of k
// of x and wt in shared memory; each thread owns one output column and 4
// rows and walks k in order, so the chain per output is the CPU's.

#include "cuda_common.cuh"

namespace tutti::kernels::cuda {
namespace {

constexpr int kCols = 64;   // outputs per block (threadIdx.x)
constexpr int kRowsPer = 4; // rows per thread
constexpr int kRowGroups = 4; // threadIdx.y
constexpr int kRows = kRowsPer * kRowGroups;
constexpr int kChunk = 32; // steps of k staged at a time

__device__ inline float fused(float a, float b, float c) {
  return __fmaf_rn(a, b, c);
}
__device__ inline double fused(double a, double b, double c) {
  return __fma_rn(a, b, c);
}

template <class T>
__global__ void invariant_gemm(const T* x, int64_t ldx, const T* wt, T* y,
                               int64_t ldy, int64_t m, int64_t k, int64_t n) {
  __shared__ T ws[kChunk][kCols];
  __shared__ T xs[kRows][kChunk + 1]; // +1: no bank conflicts across rows
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * kCols + tx, threads = kCols * kRowGroups;
  const int64_t j0 = int64_t(blockIdx.x) * kCols, i0 = int64_t(blockIdx.y) * kRows;
  const int64_t j = j0 + tx;
  T acc[kRowsPer];
#pragma unroll
  for (int r = 0; r < kRowsPer; ++r)
    acc[r] = T(0);
  for (int64_t t0 = 0; t0 < k; t0 += kChunk) {
    const int steps = int(k - t0 < kChunk ? k - t0 : kChunk);
    for (int e = tid; e < kChunk * kCols; e += threads) {
      const int t = e / kCols, c = e % kCols;
      ws[t][c] = t < steps && j0 + c < n ? wt[(t0 + t) * n + j0 + c] : T(0);
    }
    for (int e = tid; e < kRows * kChunk; e += threads) {
      const int r = e / kChunk, t = e % kChunk;
      xs[r][t] = t < steps && i0 + r < m ? x[(i0 + r) * ldx + t0 + t] : T(0);
    }
    __syncthreads();
    for (int t = 0; t < steps; ++t) {
      const T w = ws[t][tx];
#pragma unroll
      for (int r = 0; r < kRowsPer; ++r)
        acc[r] = fused(w, xs[ty * kRowsPer + r][t], acc[r]);
    }
    __syncthreads();
  }
  if (j >= n)
    return;
#pragma unroll
  for (int r = 0; r < kRowsPer; ++r) {
    const int64_t i = i0 + ty * kRowsPer + r;
    if (i < m)
      y[i * ldy + j] = acc[r];
  }
}

} // namespace

template <class T>
void invariant_linear_forward(const stream& s, const T* x, int64_t ldx,
                              const T* wt, T* y, int64_t ldy, int64_t m,
                              int64_t k, int64_t n) {
  if (m == 0 || n == 0)
    return;
  const int64_t col_blocks = (n + kCols - 1) / kCols;
  const int64_t row_blocks = (m + kRows - 1) / kRows;
  TUTTI_DEVICE_REQUIRE(col_blocks <= 0x7fffffff && row_blocks <= 65535,
                       "invariant_linear_forward: m or n too large");
  const dim3 grid{unsigned(col_blocks), unsigned(row_blocks)};
  const dim3 block{kCols, kRowGroups};
  invariant_gemm<<<grid, block, 0, raw(s)>>>(x, ldx, wt, y, ldy, m, k, n);
  TUTTI_CUDA_LAUNCH_CHECK();
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_INVARIANT
#include "../instantiate_ops.inc"

} // namespace tutti::kernels::cuda
