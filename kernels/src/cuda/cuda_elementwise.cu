// Row-wise and elementwise ops on CUDA: embedding, RMSNorm, RoPE, SwiGLU,
// and the vector helpers (sum_squares, axpy, fill_zero).
//
// Each kernel does the CPU backend's arithmetic (cpu_elementwise.cpp) in the
// same precision: per-row sums in double, one rounding to T at the end. Row
// reductions are one block per row with a fixed tree; the weight gradient
// of RMSNorm is one thread per column walking the rows in order, exactly as
// the CPU adds them. No float atomics anywhere.

#include <cmath>

#include "../host_device.hpp"
#include "cuda_common.cuh"

namespace tutti::kernels::cuda {
namespace {

// -- embedding -------------------------------------------------------------------

template <class T>
__global__ void embedding_fwd(const int32_t* ids, const T* table, T* out,
                              int64_t n, int64_t dim) {
  TUTTI_GRID_STRIDE(i, n * dim) {
    const int64_t row = i / dim, col = i % dim;
    out[i] = table[int64_t(ids[row]) * dim + col];
  }
}

// -- RMSNorm -------------------------------------------------------------------------

template <class T>
__global__ void rmsnorm_fwd(const T* x, const T* w, T* y, T* rstd, int64_t dim,
                            double eps) {
  const T* xi = x + int64_t(blockIdx.x) * dim;
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    ss += double(xi[j]) * double(xi[j]);
  ss = block_sum(ss);
  const double r = 1.0 / sqrt(ss / double(dim) + eps);
  if (threadIdx.x == 0)
    rstd[blockIdx.x] = T(r);
  T* yi = y + int64_t(blockIdx.x) * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    yi[j] = T(double(xi[j]) * r * double(w[j]));
}

// dx = r * g - x * r^3 * <g, x> / dim with g = w * dy (see the CPU file).
template <class T>
__global__ void rmsnorm_bwd_dx(const T* x, const T* w, const T* rstd,
                               const T* dy, T* dx, int64_t dim) {
  const int64_t off = int64_t(blockIdx.x) * dim;
  const double r = double(rstd[blockIdx.x]);
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    dot += double(w[j]) * double(dy[off + j]) * double(x[off + j]);
  dot = block_sum(dot);
  const double c = r * r * r * dot / double(dim);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    dx[off + j] = T(r * double(w[j]) * double(dy[off + j])
                    - double(x[off + j]) * c);
}

// dw[j] += sum_i dy[i,j] * x[i,j] * rstd[i], added row by row in T as on
// the CPU. One thread per column: coalesced across the warp.
template <class T>
__global__ void rmsnorm_bwd_dw(const T* x, const T* rstd, const T* dy, T* dw,
                               int64_t n, int64_t dim) {
  TUTTI_GRID_STRIDE(j, dim) {
    T acc = dw[j];
    for (int64_t i = 0; i < n; ++i)
      acc += T(double(dy[i * dim + j]) * double(x[i * dim + j])
               * double(rstd[i]));
    dw[j] = acc;
  }
}

// -- RoPE -----------------------------------------------------------------------------

// One thread per (b, p, h, i < half) pair; angles in double as on the CPU.
template <class T>
__global__ void rope_apply(T* x, int64_t batch, int64_t seq, int64_t heads,
                           int64_t head_dim, double theta, double direction) {
  const int64_t half = head_dim / 2;
  TUTTI_GRID_STRIDE(idx, batch * seq * heads * half) {
    const int64_t i = idx % half;
    const int64_t bph = idx / half; // ((b * seq + p) * heads + h)
    const int64_t p = (bph / heads) % seq;
    const double inv_freq = pow(theta, -2.0 * double(i) / double(head_dim));
    const double a = double(p) * inv_freq;
    const double cs = cos(a), sn = direction * sin(a);
    T* v = x + bph * head_dim;
    const double x1 = v[i], x2 = v[i + half];
    v[i] = T(x1 * cs - x2 * sn);
    v[i + half] = T(x2 * cs + x1 * sn);
  }
}

template <class T>
void launch_rope(const stream& s, T* x, int64_t batch, int64_t seq,
                 int64_t heads, int64_t head_dim, double theta,
                 double direction) {
  const int64_t pairs = batch * seq * heads * (head_dim / 2);
  if (pairs == 0)
    return;
  rope_apply<<<grid_for(pairs), kThreads, 0, raw(s)>>>(
    x, batch, seq, heads, head_dim, theta, direction);
  TUTTI_CUDA_LAUNCH_CHECK();
}

// -- SwiGLU ---------------------------------------------------------------------------

using detail::sigmoid;

template <class T>
__global__ void swiglu_fwd(const T* gate, const T* up, T* h, int64_t n) {
  TUTTI_GRID_STRIDE(i, n) {
    const double g = gate[i];
    h[i] = T(g * sigmoid(g) * double(up[i]));
  }
}

template <class T>
__global__ void swiglu_bwd(const T* gate, const T* up, const T* dh, T* dgate,
                           T* dup, int64_t n) {
  TUTTI_GRID_STRIDE(i, n) {
    const double g = gate[i], sg = sigmoid(g), d = dh[i];
    dgate[i] = T(d * double(up[i]) * sg * (1.0 + g * (1.0 - sg)));
    dup[i] = T(d * g * sg);
  }
}

// -- helpers ----------------------------------------------------------------------------

template <class T>
struct square_term {
  const T* x;
  __device__ double operator()(int64_t i) const {
    return double(x[i]) * double(x[i]);
  }
};

// 1 for a NaN or infinite value, else 0: classification, not arithmetic,
// so a finite value of any size counts as finite (a double's square
// overflows from |x| ~ 1.3e154 on).
template <class T>
struct non_finite_term {
  const T* x;
  __device__ double operator()(int64_t i) const {
    return isfinite(x[i]) ? 0.0 : 1.0;
  }
};

template <class T>
__global__ void axpy_kernel(T a, const T* x, T* y, int64_t n) {
  TUTTI_GRID_STRIDE(i, n) y[i] += a * x[i];
}

template <class T>
__global__ void strided_copy_kernel(const T* src, int64_t src_row,
                                    int64_t src_col, T* dst, int64_t dst_row,
                                    int64_t dst_col, int64_t rows, int64_t cols,
                                    bool accumulate) {
  TUTTI_GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    const T v = src[r * src_row + c * src_col];
    T& out = dst[r * dst_row + c * dst_col];
    out = accumulate ? out + v : v;
  }
}

} // namespace

template <class T>
void embedding_forward(const stream& s, const int32_t* ids, const T* table,
                       T* out, int64_t n, int64_t dim) {
  if (n * dim == 0)
    return;
  embedding_fwd<<<grid_for(n * dim), kThreads, 0, raw(s)>>>(ids, table, out, n,
                                                            dim);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void embedding_backward(const stream& s, const int32_t* ids, const T* dout,
                        T* dtable, int64_t n, int64_t dim) {
  // Repeated ids add up in token order, as on the CPU.
  add_rows_by_key(s, ids, 1, dout, dtable, n, dim);
}

template <class T>
void rmsnorm_forward(const stream& s, const T* x, const T* w, T* y, T* rstd,
                     int64_t n, int64_t dim, T eps) {
  if (n == 0)
    return;
  rmsnorm_fwd<<<as_int(n, "rmsnorm rows"), kThreads, 0, raw(s)>>>(
    x, w, y, rstd, dim, double(eps));
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void rmsnorm_backward(const stream& s, const T* x, const T* w, const T* rstd,
                      const T* dy, T* dx, T* dw, int64_t n, int64_t dim) {
  if (n == 0 || dim == 0)
    return;
  rmsnorm_bwd_dx<<<as_int(n, "rmsnorm rows"), kThreads, 0, raw(s)>>>(
    x, w, rstd, dy, dx, dim);
  TUTTI_CUDA_LAUNCH_CHECK();
  rmsnorm_bwd_dw<<<grid_for(dim, 128), 128, 0, raw(s)>>>(x, rstd, dy, dw, n,
                                                         dim);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void rope_forward(const stream& s, T* x, int64_t batch, int64_t seq,
                  int64_t heads, int64_t head_dim, double theta) {
  launch_rope(s, x, batch, seq, heads, head_dim, theta, 1.0);
}

template <class T>
void rope_backward(const stream& s, T* dx, int64_t batch, int64_t seq,
                   int64_t heads, int64_t head_dim, double theta) {
  // The transpose of a rotation is its inverse: rotate by -angle.
  launch_rope(s, dx, batch, seq, heads, head_dim, theta, -1.0);
}

template <class T>
void swiglu_forward(const stream& s, const T* gate, const T* up, T* h,
                    int64_t n) {
  if (n == 0)
    return;
  swiglu_fwd<<<grid_for(n), kThreads, 0, raw(s)>>>(gate, up, h, n);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void swiglu_backward(const stream& s, const T* gate, const T* up, const T* dh,
                     T* dgate, T* dup, int64_t n) {
  if (n == 0)
    return;
  swiglu_bwd<<<grid_for(n), kThreads, 0, raw(s)>>>(gate, up, dh, dgate, dup, n);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
double sum_squares(const stream& s, const T* x, int64_t n) {
  return reduce_to_host(s, n, square_term<T>{x});
}

// A count of the NaN and infinite values (one deterministic reduction).
template <class T>
bool all_finite(const stream& s, const T* x, int64_t n) {
  return reduce_to_host(s, n, non_finite_term<T>{x}) == 0.0;
}

template <class T>
void axpy(const stream& s, T a, const T* x, T* y, int64_t n) {
  if (n == 0)
    return;
  axpy_kernel<<<grid_for(n), kThreads, 0, raw(s)>>>(a, x, y, n);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void fill_zero(const stream& s, T* x, int64_t n) {
  // All-zero bytes are +0.0 in IEEE float and double.
  if (n == 0)
    return;
  TUTTI_CUDA_CHECK(cudaMemsetAsync(x, 0, sizeof(T) * n, raw(s)));
}

template <class T>
void strided_copy(const stream& s, const T* src, int64_t src_row,
                  int64_t src_col, T* dst, int64_t dst_row, int64_t dst_col,
                  int64_t rows, int64_t cols, bool accumulate) {
  if (rows * cols == 0)
    return;
  strided_copy_kernel<<<grid_for(rows * cols), kThreads, 0, raw(s)>>>(
    src, src_row, src_col, dst, dst_row, dst_col, rows, cols, accumulate);
  TUTTI_CUDA_LAUNCH_CHECK();
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_ELEMENTWISE
#include "../instantiate_ops.inc"

} // namespace tutti::kernels::cuda
