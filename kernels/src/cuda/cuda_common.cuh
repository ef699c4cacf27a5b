#pragma once
// Shared pieces of the CUDA backend: stream and handle access, per-stream
// scratch memory, launch sizes, deterministic block reductions and a
// deterministic device-to-host sum.
//
// Determinism: every reduction here has a fixed shape that depends only on
// the problem size (grid, block, the order of the tree), never on timing,
// and no float atomics are used. Run twice on the same GPU model, an op
// gives the same bits.

#include <cuda_runtime.h>

#include <cstdint>

#include "../backends.hpp"
#include "cublas_loader.hpp"
#include "cuda_check.hpp"

namespace tutti::kernels::cuda {

inline cudaStream_t raw(const stream& s) {
  return static_cast<cudaStream_t>(s.handle);
}

// The calling thread's cuBLAS handle for the current device, bound to
// s.handle, made on first use with full-fp32 math (no TF32).
cublasHandle_t blas_handle(const stream& s);

// Scratch device memory for one op call on stream s: valid until the next
// call with the same (stream, slot). Work queued on a stream runs in order,
// so one buffer per stream is enough; it only grows, the old one freed in
// stream order (cudaFreeAsync), so growing never waits for the device nor
// holds a lock other streams need. Two slots, so an op's own scratch and
// the reduction helper below can be used in the same call.
enum class scratch_slot { main = 0, reduce = 1 };
void* scratch(const stream& s, size_t bytes,
              scratch_slot slot = scratch_slot::main);
// Frees the scratch of a stream about to be destroyed (declared for host
// code in cuda_check.hpp).

// Carves aligned sub-arrays out of one scratch request: first size it
// (take with base == nullptr counts bytes), then carve for real.
class carver {
public:
  explicit carver(void* base = nullptr) : base_(static_cast<char*>(base)) {}
  template <class T>
  T* take(int64_t count) {
    const size_t at = (used_ + 255) & ~size_t(255);
    used_ = at + size_t(count) * sizeof(T);
    return base_ ? reinterpret_cast<T*>(base_ + at) : nullptr;
  }
  size_t bytes() const { return used_ + 256; }

private:
  char* base_;
  size_t used_ = 0;
};

// 1-D launches use grid-stride loops over int64 indices; the grid is
// capped so huge tensors do not need huge grids.
constexpr int kThreads = 256;
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(
    blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

#define TUTTI_GRID_STRIDE(i, n)                                                \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += int64_t(blockDim.x) * gridDim.x)

// Sum over the block; every thread gets the result. blockDim.x must be a
// multiple of 32 (<= 1024). Fixed shuffle tree, then warp 0 adds the warp
// totals in warp order: the same bits every run.
template <class V>
__device__ V block_sum(V v) {
  __shared__ V part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_down_sync(0xffffffffu, v, o);
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    V r = lane < warps ? part[lane] : V(0);
    for (int o = 16; o > 0; o >>= 1)
      r += __shfl_down_sync(0xffffffffu, r, o);
    if (lane == 0)
      part[0] = r;
  }
  __syncthreads();
  const V total = part[0];
  __syncthreads(); // `part` may be reused by the next call
  return total;
}

// Max over the block; every thread gets it. Same shape rules as block_sum.
template <class V>
__device__ V block_max(V v) {
  __shared__ V part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const V other = __shfl_down_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    V r = lane < warps ? part[lane] : part[0];
    for (int o = 16; o > 0; o >>= 1) {
      const V other = __shfl_down_sync(0xffffffffu, r, o);
      r = other > r ? other : r;
    }
    if (lane == 0)
      part[0] = r;
  }
  __syncthreads();
  const V result = part[0];
  __syncthreads();
  return result;
}

// -- deterministic sum to the host ----------------------------------------------

constexpr int kReduceBlocks = 512;

template <class F>
__global__ void reduce_partials(F term, int64_t n, double* partial) {
  double acc = 0.0;
  TUTTI_GRID_STRIDE(i, n) acc += term(i);
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = acc;
}

template <class V>
__global__ void reduce_final(const V* partial, int count, V* out) {
  V acc = V(0);
  for (int i = threadIdx.x; i < count; i += blockDim.x)
    acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    *out = acc;
}

// sum_{i < n} term(i), in double, returned to the host (synchronizes s).
// `term` is a copyable functor with `__device__ double operator()(int64_t)`.
// Two passes with a grid that depends on n only, so the order is fixed.
template <class F>
double reduce_to_host(const stream& s, int64_t n, F term) {
  if (n <= 0)
    return 0.0;
  const unsigned blocks = grid_for(n) < kReduceBlocks ? grid_for(n)
                                                      : kReduceBlocks;
  auto* partial = static_cast<double*>(
    scratch(s, sizeof(double) * (kReduceBlocks + 1), scratch_slot::reduce));
  reduce_partials<<<blocks, kThreads, 0, raw(s)>>>(term, n, partial);
  TUTTI_CUDA_LAUNCH_CHECK();
  reduce_final<<<1, kReduceBlocks, 0, raw(s)>>>(partial, int(blocks),
                                                partial + kReduceBlocks);
  TUTTI_CUDA_LAUNCH_CHECK();
  double result = 0.0;
  TUTTI_CUDA_CHECK(cudaMemcpyAsync(&result, partial + kReduceBlocks,
                                   sizeof(double), cudaMemcpyDeviceToHost,
                                   raw(s)));
  TUTTI_CUDA_CHECK(cudaStreamSynchronize(raw(s)));
  return result;
}

// Copies one value from device memory to the host (synchronizes s).
template <class V>
V value_to_host(const stream& s, const V* device_value) {
  V v{};
  TUTTI_CUDA_CHECK(cudaMemcpyAsync(&v, device_value, sizeof(V),
                                   cudaMemcpyDeviceToHost, raw(s)));
  TUTTI_CUDA_CHECK(cudaStreamSynchronize(raw(s)));
  return v;
}

// dst[keys[i] / divisor, :] += src[i, :] for i < rows (keys >= 0). Rows
// that share a destination add in increasing i, as the CPU's sequential
// loops do, or with `in_key_order` in increasing key (slot order: the
// combine's backward), without atomics: a stable radix sort of i by key,
// then one thread per (destination, column) walks its run. Uses the main
// scratch slot. (cuda_dispatch.cu; float and double.)
template <class T>
void add_rows_by_key(const stream& s, const int32_t* keys, int64_t divisor,
                     const T* src, T* dst, int64_t rows, int64_t dim,
                     bool in_key_order = false);

// cuBLAS and CUB take int sizes.
inline int as_int(int64_t v, const char* what) {
  TUTTI_DEVICE_REQUIRE(v >= 0 && v <= 0x7fffffff, what);
  return static_cast<int>(v);
}

} // namespace tutti::kernels::cuda
