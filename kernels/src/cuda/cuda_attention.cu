// Causal grouped-query attention on CUDA, forward and backward.
//
// The [s, s] API of the CPU backend's short sequences, for parity: models
// on CUDA run the tiled kernels (cuda_attention_tiled.cu,
// kernels::attention_is_tiled), which keep no [s, s] buffer. Here one block
// per (query row, head, batch), the S x S scores kept in `probs` exactly as
// the CPU backend keeps them, dot products accumulated in T like the CPU's
// BLAS GEMMs, softmax sums in double.
//
// Backward: one block per query row computes dS = P * (dP - rowsum(P dP))
// into scratch and dQ; then one block per (key row, kv head, batch) sums
// dK and dV over the query heads of its group and the rows i >= j, in a
// fixed order. No atomics: every output element has exactly one writer.

#include <cmath>

#include "cuda_common.cuh"

namespace tutti::kernels::cuda {
namespace {

constexpr int kAttnThreads = 128;

struct attn_shape {
  int64_t S, hq, hkv, d;
  __device__ int64_t ldq() const { return hq * d; }
  __device__ int64_t ldk() const { return hkv * d; }
  __device__ int64_t group() const { return hq / hkv; }
};

// Grid (S, hq, batch): row i of head h in batch b.
template <class T>
__global__ void attn_fwd(const T* q, const T* k, const T* v, T* out, T* probs,
                         attn_shape sh, T scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t S = sh.S, d = sh.d, ldq = sh.ldq(), ldk = sh.ldk();
  const int64_t kh = h / sh.group();
  const T* qi = q + (b * S + i) * ldq + h * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    qs[c] = qi[c];
  __syncthreads();
  const T* kb = k + b * S * ldk + kh * d;
  const T* vb = v + b * S * ldk + kh * d;
  T* row = probs + ((b * sh.hq + h) * S + i) * S;

  // Scores for keys 0..i; each thread owns the same j's in every loop below,
  // so it only ever reads back what it wrote itself until the barrier.
  T mx = T(-INFINITY);
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    T dot = T(0);
    for (int64_t c = 0; c < d; ++c)
      dot += qs[c] * kb[j * ldk + c];
    const T sc = scale * dot;
    row[j] = sc;
    mx = sc > mx ? sc : mx;
  }
  mx = block_max(mx);
  double denom = 0.0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const double e = exp(double(row[j]) - double(mx));
    row[j] = T(e);
    denom += e;
  }
  denom = block_sum(denom);
  const double inv = 1.0 / denom;
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
    row[j] = j <= i ? T(double(row[j]) * inv) : T(0); // masked: exact zeros
  __syncthreads();

  T* oi = out + (b * S + i) * ldq + h * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    T acc = T(0);
    for (int64_t j = 0; j <= i; ++j)
      acc += row[j] * vb[j * ldk + c];
    oi[c] = acc;
  }
}

// Grid (S, hq, batch): dS row i (into ds) and dQ row i.
template <class T>
__global__ void attn_bwd_rows(const T* k, const T* v, const T* probs,
                              const T* dout, T* ds, T* dq, attn_shape sh,
                              T scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* dos = reinterpret_cast<T*>(smem);
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t S = sh.S, d = sh.d, ldq = sh.ldq(), ldk = sh.ldk();
  const int64_t kh = h / sh.group();
  const T* doi = dout + (b * S + i) * ldq + h * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    dos[c] = doi[c];
  __syncthreads();
  const T* kb = k + b * S * ldk + kh * d;
  const T* vb = v + b * S * ldk + kh * d;
  const T* p = probs + ((b * sh.hq + h) * S + i) * S;
  T* r = ds + ((b * sh.hq + h) * S + i) * S;

  // dP = dO V^T, then dS = P * (dP - <P, dP>), causal part only.
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    T dp = T(0);
    for (int64_t c = 0; c < d; ++c)
      dp += dos[c] * vb[j * ldk + c];
    r[j] = dp;
    dot += double(p[j]) * double(dp);
  }
  dot = block_sum(dot);
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    r[j] = T(double(p[j]) * (double(r[j]) - dot));
  __syncthreads();

  // dQ = scale * dS K
  T* dqi = dq + (b * S + i) * ldq + h * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    T acc = T(0);
    for (int64_t j = 0; j <= i; ++j)
      acc += r[j] * kb[j * ldk + c];
    dqi[c] = scale * acc;
  }
}

// Grid (S, hkv, batch): key row j of kv head kh. dK = scale * dS^T Q and
// dV = P^T dO, summed over the group's query heads and rows i >= j.
template <class T>
__global__ void attn_bwd_cols(const T* q, const T* probs, const T* dout,
                              const T* ds, T* dk, T* dv, attn_shape sh,
                              T scale) {
  const int64_t j = blockIdx.x, kh = blockIdx.y, b = blockIdx.z;
  const int64_t S = sh.S, d = sh.d, ldq = sh.ldq(), ldk = sh.ldk();
  const int64_t group = sh.group();
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    T acc_k = T(0), acc_v = T(0);
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      const int64_t base = (b * sh.hq + h) * S * S;
      for (int64_t i = j; i < S; ++i) {
        const int64_t at = (b * S + i) * ldq + h * d + c;
        acc_k += ds[base + i * S + j] * q[at];
        acc_v += probs[base + i * S + j] * dout[at];
      }
    }
    dk[(b * S + j) * ldk + kh * d + c] = scale * acc_k;
    dv[(b * S + j) * ldk + kh * d + c] = acc_v;
  }
}

void check_shape(int64_t batch, int64_t seq, int64_t q_heads,
                 int64_t kv_heads) {
  TUTTI_DEVICE_REQUIRE(kv_heads > 0 && q_heads % kv_heads == 0,
                       "attention: q_heads must be a multiple of kv_heads");
  TUTTI_DEVICE_REQUIRE(batch <= 65535 && q_heads <= 65535,
                       "attention: batch and heads must be <= 65535");
  as_int(seq, "attention: seq");
}

} // namespace

template <class T>
void attention_forward(const stream& s, const T* q, const T* k, const T* v,
                       T* out, T* probs, int64_t batch, int64_t seq,
                       int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  if (batch * seq * q_heads == 0)
    return;
  check_shape(batch, seq, q_heads, kv_heads);
  const T scale = T(1.0 / std::sqrt(double(head_dim)));
  const attn_shape sh{seq, q_heads, kv_heads, head_dim};
  const dim3 grid{unsigned(seq), unsigned(q_heads), unsigned(batch)};
  attn_fwd<<<grid, kAttnThreads, sizeof(T) * head_dim, raw(s)>>>(
    q, k, v, out, probs, sh, scale);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void attention_backward(const stream& s, const T* q, const T* k, const T* v,
                        const T* probs, const T* dout, T* dq, T* dk, T* dv,
                        int64_t batch, int64_t seq, int64_t q_heads,
                        int64_t kv_heads, int64_t head_dim) {
  if (batch * seq * q_heads == 0)
    return;
  check_shape(batch, seq, q_heads, kv_heads);
  const T scale = T(1.0 / std::sqrt(double(head_dim)));
  const attn_shape sh{seq, q_heads, kv_heads, head_dim};
  T* ds = static_cast<T*>(scratch(s, sizeof(T) * batch * q_heads * seq * seq));
  const dim3 rows{unsigned(seq), unsigned(q_heads), unsigned(batch)};
  attn_bwd_rows<<<rows, kAttnThreads, sizeof(T) * head_dim, raw(s)>>>(
    k, v, probs, dout, ds, dq, sh, scale);
  TUTTI_CUDA_LAUNCH_CHECK();
  const dim3 cols{unsigned(seq), unsigned(kv_heads), unsigned(batch)};
  attn_bwd_cols<<<cols, kAttnThreads, 0, raw(s)>>>(q, probs, dout, ds, dk, dv,
                                                   sh, scale);
  TUTTI_CUDA_LAUNCH_CHECK();
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_ATTENTION
#include "../instantiate_ops.inc"

} // namespace tutti::kernels::cuda
