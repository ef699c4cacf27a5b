// Causal grouped-query attention on CUDA, tiled (flash attention): the
// algorithm of cpu_attention_tiled.cpp with the tiles in shared memory, so
// no [s, s] buffer exists in device memory, forward or backward.
//
//   forward    one block per (query tile, head, batch): key tiles up to the
//              diagonal in order, running max and sum per row; writes out
//              and lse = max + log(sum).
//   backward   D = rowsum(dout * out) (one value per query row: the only
//              scratch), then one block per (key tile, kv head, batch)
//              summing dK and dV over the group's heads and the query tiles
//              from the diagonal on, and one block per (query tile, head,
//              batch) summing dQ over the key tiles up to the diagonal.
//              Both recompute P = exp(score - lse) tile by tile.
//
// Deterministic: every output element has one writer, which adds its terms
// in a fixed order (no atomics). Dot products and sums accumulate in T.
// Tiles are kTile(T) x kTile(T), so fp64 and head_dim 256 still fit the
// shared memory an H100 block can have (227 KiB, opted into above 48 KiB).

#include <cmath>

#include "cuda_common.cuh"

namespace tutti::kernels::cuda {
namespace {

constexpr int kTiledThreads = 128;

template <class T>
constexpr int tile_of() {
  return sizeof(T) == 4 ? 32 : 16;
}

__device__ inline float dev_exp(float x) { return expf(x); }
__device__ inline double dev_exp(double x) { return exp(x); }
__device__ inline float dev_log(float x) { return logf(x); }
__device__ inline double dev_log(double x) { return log(x); }

struct tiled_shape {
  int64_t S, hq, hkv, d;
  __host__ __device__ int64_t ldq() const { return hq * d; }
  __host__ __device__ int64_t ldk() const { return hkv * d; }
  __host__ __device__ int64_t group() const { return hq / hkv; }
};

// rows x d values from src (row stride ld) into dst (row stride d); rows
// past `rows` are zeros.
template <class T, int B>
__device__ void load_rows(T* dst, const T* src, int64_t ld, int64_t rows,
                          int64_t d) {
  for (int64_t e = threadIdx.x; e < B * d; e += blockDim.x) {
    const int64_t r = e / d, c = e % d;
    dst[e] = r < rows ? src[r * ld + c] : T(0);
  }
}

template <class T>
__device__ T dot(const T* a, const T* b, int64_t d) {
  T acc = T(0);
  for (int64_t c = 0; c < d; ++c)
    acc += a[c] * b[c];
  return acc;
}

// Grid (query tiles, hq, batch).
template <class T, int B>
__global__ void tiled_fwd(const T* q, const T* k, const T* v, T* out, T* lse,
                          tiled_shape sh, T scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t d = sh.d, S = sh.S, ldq = sh.ldq(), ldk = sh.ldk();
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + B * d;
  T* vs = ks + B * d;
  T* acc = vs + B * d;
  T* ps = acc + B * d;
  T* m = ps + B * B;
  T* l = m + B;
  T* alpha = l + B;
  const int64_t i0 = int64_t(blockIdx.x) * B, h = blockIdx.y, b = blockIdx.z;
  const int64_t rows = S - i0 < B ? S - i0 : B;
  const int64_t kh = h / sh.group();
  const T* kb = k + b * S * ldk + kh * d;
  const T* vb = v + b * S * ldk + kh * d;
  load_rows<T, B>(qs, q + (b * S + i0) * ldq + h * d, ldq, rows, d);
  for (int64_t e = threadIdx.x; e < B * d; e += blockDim.x)
    acc[e] = T(0);
  if (threadIdx.x < B) {
    m[threadIdx.x] = T(-INFINITY);
    l[threadIdx.x] = T(0);
  }
  for (int64_t j0 = 0; j0 < i0 + rows; j0 += B) {
    const int64_t cols = i0 + rows - j0 < B ? i0 + rows - j0 : B;
    __syncthreads(); // the previous tile's ks, vs, ps are read
    load_rows<T, B>(ks, kb + j0 * ldk, ldk, cols, d);
    load_rows<T, B>(vs, vb + j0 * ldk, ldk, cols, d);
    __syncthreads();
    for (int e = threadIdx.x; e < B * B; e += blockDim.x) {
      const int r = e / B, c = e % B;
      const bool keep = r < rows && c < cols && j0 + c <= i0 + r;
      ps[e] = keep ? scale * dot(qs + r * d, ks + c * d, d) : T(-INFINITY);
    }
    __syncthreads();
    if (threadIdx.x < rows) {
      const int r = threadIdx.x;
      T mx = m[r];
      for (int c = 0; c < cols; ++c)
        mx = ps[r * B + c] > mx ? ps[r * B + c] : mx;
      // Key 0 is in row r's first tile, so mx is finite from then on.
      const T a = dev_exp(m[r] - mx);
      T sum = T(0);
      for (int c = 0; c < B; ++c) {
        const T p = c < cols ? dev_exp(ps[r * B + c] - mx) : T(0);
        ps[r * B + c] = p;
        sum += p;
      }
      l[r] = l[r] * a + sum;
      m[r] = mx;
      alpha[r] = a;
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < rows * d; e += blockDim.x) {
      const int64_t r = e / d, c = e % d;
      T x = acc[e] * alpha[r];
      for (int jj = 0; jj < cols; ++jj)
        x += ps[r * B + jj] * vs[jj * d + c];
      acc[e] = x;
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < rows * d; e += blockDim.x) {
    const int64_t r = e / d, c = e % d;
    out[(b * S + i0 + r) * ldq + h * d + c] = acc[e] / l[r];
  }
  if (threadIdx.x < rows)
    lse[(b * sh.hq + h) * S + i0 + threadIdx.x] =
      m[threadIdx.x] + dev_log(l[threadIdx.x]);
}

// D[b, h, i] = sum_c dout * out over row i of head h.
template <class T>
__global__ void tiled_rowdot(const T* out, const T* dout, T* rowdot,
                             tiled_shape sh, int64_t batch) {
  TUTTI_GRID_STRIDE(e, batch * sh.hq * sh.S) {
    const int64_t i = e % sh.S, h = (e / sh.S) % sh.hq, b = e / (sh.S * sh.hq);
    const int64_t at = (b * sh.S + i) * sh.ldq() + h * sh.d;
    rowdot[e] = dot(dout + at, out + at, sh.d);
  }
}

// P and dS of one (query tile, key tile) pair into ps and dss: rows x cols,
// row stride B, zeros where masked or out of range.
template <class T, int B>
__device__ void tile_grads(const T* qs, const T* dos, const T* ks,
                           const T* vs, const T* lse_t, const T* rowdot_t,
                           int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                           int64_t d, T scale, T* ps, T* dss) {
  for (int e = threadIdx.x; e < B * B; e += blockDim.x) {
    const int r = e / B, c = e % B;
    T p = T(0), g = T(0);
    if (r < rows && c < cols && j0 + c <= i0 + r) {
      p = dev_exp(scale * dot(qs + r * d, ks + c * d, d) - lse_t[r]);
      g = p * (dot(dos + r * d, vs + c * d, d) - rowdot_t[r]);
    }
    ps[e] = p;
    dss[e] = g;
  }
}

// Grid (key tiles, hkv, batch): dK and dV of key rows j0.. of kv head kh.
template <class T, int B>
__global__ void tiled_bwd_kv(const T* q, const T* k, const T* v,
                             const T* lse, const T* dout, const T* rowdot,
                             T* dk, T* dv, tiled_shape sh, T scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t d = sh.d, S = sh.S, ldq = sh.ldq(), ldk = sh.ldk();
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + B * d;
  T* qs = vs + B * d;
  T* dos = qs + B * d;
  T* dk_acc = dos + B * d;
  T* dv_acc = dk_acc + B * d;
  T* ps = dv_acc + B * d;
  T* dss = ps + B * B;
  const int64_t j0 = int64_t(blockIdx.x) * B, kh = blockIdx.y, b = blockIdx.z;
  const int64_t cols = S - j0 < B ? S - j0 : B;
  load_rows<T, B>(ks, k + (b * S + j0) * ldk + kh * d, ldk, cols, d);
  load_rows<T, B>(vs, v + (b * S + j0) * ldk + kh * d, ldk, cols, d);
  for (int64_t e = threadIdx.x; e < B * d; e += blockDim.x)
    dk_acc[e] = dv_acc[e] = T(0);
  for (int64_t h = kh * sh.group(); h < (kh + 1) * sh.group(); ++h) {
    const T* lse_h = lse + (b * sh.hq + h) * S;
    const T* rowdot_h = rowdot + (b * sh.hq + h) * S;
    for (int64_t i0 = j0; i0 < S; i0 += B) { // aligned tiles: from j0 on
      const int64_t rows = S - i0 < B ? S - i0 : B;
      __syncthreads(); // the previous tile's qs, dos, ps, dss are read
      load_rows<T, B>(qs, q + (b * S + i0) * ldq + h * d, ldq, rows, d);
      load_rows<T, B>(dos, dout + (b * S + i0) * ldq + h * d, ldq, rows, d);
      __syncthreads();
      tile_grads<T, B>(qs, dos, ks, vs, lse_h + i0, rowdot_h + i0, i0, rows,
                       j0, cols, d, scale, ps, dss);
      __syncthreads();
      for (int64_t e = threadIdx.x; e < cols * d; e += blockDim.x) {
        const int64_t c = e / d, x = e % d;
        T gk = dk_acc[e], gv = dv_acc[e];
        for (int r = 0; r < rows; ++r) {
          gk += dss[r * B + c] * qs[r * d + x];
          gv += ps[r * B + c] * dos[r * d + x];
        }
        dk_acc[e] = gk;
        dv_acc[e] = gv;
      }
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < cols * d; e += blockDim.x) {
    const int64_t c = e / d, x = e % d;
    dk[(b * S + j0 + c) * ldk + kh * d + x] = scale * dk_acc[e];
    dv[(b * S + j0 + c) * ldk + kh * d + x] = dv_acc[e];
  }
}

// Grid (query tiles, hq, batch): dQ of query rows i0.. of head h.
template <class T, int B>
__global__ void tiled_bwd_q(const T* q, const T* k, const T* v, const T* lse,
                            const T* dout, const T* rowdot, T* dq,
                            tiled_shape sh, T scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t d = sh.d, S = sh.S, ldq = sh.ldq(), ldk = sh.ldk();
  T* qs = reinterpret_cast<T*>(smem);
  T* dos = qs + B * d;
  T* ks = dos + B * d;
  T* vs = ks + B * d;
  T* dq_acc = vs + B * d;
  T* ps = dq_acc + B * d;
  T* dss = ps + B * B;
  const int64_t i0 = int64_t(blockIdx.x) * B, h = blockIdx.y, b = blockIdx.z;
  const int64_t rows = S - i0 < B ? S - i0 : B;
  const int64_t kh = h / sh.group();
  load_rows<T, B>(qs, q + (b * S + i0) * ldq + h * d, ldq, rows, d);
  load_rows<T, B>(dos, dout + (b * S + i0) * ldq + h * d, ldq, rows, d);
  for (int64_t e = threadIdx.x; e < B * d; e += blockDim.x)
    dq_acc[e] = T(0);
  const T* lse_t = lse + (b * sh.hq + h) * S + i0;
  const T* rowdot_t = rowdot + (b * sh.hq + h) * S + i0;
  for (int64_t j0 = 0; j0 < i0 + rows; j0 += B) {
    const int64_t cols = i0 + rows - j0 < B ? i0 + rows - j0 : B;
    __syncthreads(); // the previous tile's ks, vs, dss are read
    load_rows<T, B>(ks, k + (b * S + j0) * ldk + kh * d, ldk, cols, d);
    load_rows<T, B>(vs, v + (b * S + j0) * ldk + kh * d, ldk, cols, d);
    __syncthreads();
    tile_grads<T, B>(qs, dos, ks, vs, lse_t, rowdot_t, i0, rows, j0, cols, d,
                     scale, ps, dss);
    __syncthreads();
    for (int64_t e = threadIdx.x; e < rows * d; e += blockDim.x) {
      const int64_t r = e / d, x = e % d;
      T g = dq_acc[e];
      for (int c = 0; c < cols; ++c)
        g += dss[r * B + c] * ks[c * d + x];
      dq_acc[e] = g;
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < rows * d; e += blockDim.x) {
    const int64_t r = e / d, x = e % d;
    dq[(b * S + i0 + r) * ldq + h * d + x] = scale * dq_acc[e];
  }
}

void check_shape(int64_t batch, int64_t q_heads, int64_t kv_heads,
                 int64_t head_dim) {
  TUTTI_DEVICE_REQUIRE(kv_heads > 0 && q_heads % kv_heads == 0,
                       "attention (tiled): q_heads must be a multiple of "
                       "kv_heads");
  TUTTI_DEVICE_REQUIRE(batch <= 65535 && q_heads <= 65535,
                       "attention (tiled): batch and heads must be <= 65535");
  TUTTI_DEVICE_REQUIRE(head_dim > 0, "attention (tiled): head_dim must be > 0");
}

// Lets `kernel` take `bytes` of dynamic shared memory (above 48 KiB a
// kernel must opt in), or refuses a head_dim the device cannot hold.
template <class K>
void allow_shared(K kernel, size_t bytes) {
  int device = 0, most = 0;
  TUTTI_CUDA_CHECK(cudaGetDevice(&device));
  TUTTI_CUDA_CHECK(cudaDeviceGetAttribute(
    &most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  TUTTI_DEVICE_REQUIRE(bytes <= size_t(most),
                       "attention (tiled): head_dim needs more shared memory "
                       "than a block of this GPU has");
  if (bytes > 48 * 1024)
    TUTTI_CUDA_CHECK(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

unsigned tiles(int64_t seq, int tile) {
  const int64_t n = (seq + tile - 1) / tile;
  TUTTI_DEVICE_REQUIRE(n <= 0x7fffffff, "attention (tiled): seq too large");
  return unsigned(n);
}

} // namespace

template <class T>
void attention_forward_tiled(const stream& s, const T* q, const T* k,
                             const T* v, T* out, T* lse, int64_t batch,
                             int64_t seq, int64_t q_heads, int64_t kv_heads,
                             int64_t head_dim) {
  if (batch * seq * q_heads == 0)
    return;
  check_shape(batch, q_heads, kv_heads, head_dim);
  constexpr int B = tile_of<T>();
  const T scale = T(1.0 / std::sqrt(double(head_dim)));
  const tiled_shape sh{seq, q_heads, kv_heads, head_dim};
  const size_t bytes = sizeof(T) * (4 * B * head_dim + B * B + 3 * B);
  allow_shared(tiled_fwd<T, B>, bytes);
  const dim3 grid{tiles(seq, B), unsigned(q_heads), unsigned(batch)};
  tiled_fwd<T, B><<<grid, kTiledThreads, bytes, raw(s)>>>(q, k, v, out, lse,
                                                          sh, scale);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void attention_backward_tiled(const stream& s, const T* q, const T* k,
                              const T* v, const T* out, const T* lse,
                              const T* dout, T* dq, T* dk, T* dv,
                              int64_t batch, int64_t seq, int64_t q_heads,
                              int64_t kv_heads, int64_t head_dim) {
  if (batch * seq * q_heads == 0)
    return;
  check_shape(batch, q_heads, kv_heads, head_dim);
  constexpr int B = tile_of<T>();
  const T scale = T(1.0 / std::sqrt(double(head_dim)));
  const tiled_shape sh{seq, q_heads, kv_heads, head_dim};
  T* rowdot = static_cast<T*>(scratch(s, sizeof(T) * batch * q_heads * seq));
  tiled_rowdot<<<grid_for(batch * q_heads * seq), kThreads, 0, raw(s)>>>(
    out, dout, rowdot, sh, batch);
  TUTTI_CUDA_LAUNCH_CHECK();

  const size_t kv_bytes = sizeof(T) * (6 * B * head_dim + 2 * B * B);
  allow_shared(tiled_bwd_kv<T, B>, kv_bytes);
  const dim3 kv_grid{tiles(seq, B), unsigned(kv_heads), unsigned(batch)};
  tiled_bwd_kv<T, B><<<kv_grid, kTiledThreads, kv_bytes, raw(s)>>>(
    q, k, v, lse, dout, rowdot, dk, dv, sh, scale);
  TUTTI_CUDA_LAUNCH_CHECK();

  const size_t q_bytes = sizeof(T) * (5 * B * head_dim + 2 * B * B);
  allow_shared(tiled_bwd_q<T, B>, q_bytes);
  const dim3 q_grid{tiles(seq, B), unsigned(q_heads), unsigned(batch)};
  tiled_bwd_q<T, B><<<q_grid, kTiledThreads, q_bytes, raw(s)>>>(
    q, k, v, lse, dout, rowdot, dq, sh, scale);
  TUTTI_CUDA_LAUNCH_CHECK();
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_ATTENTION_TILED
#include "../instantiate_ops.inc"

} // namespace tutti::kernels::cuda
