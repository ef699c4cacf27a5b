// Causal grouped-query attention, forward and backward, one (batch, head)
// at a time with BLAS GEMMs.
//
// Heads are interleaved in memory (q[b, s, h, d]), so a head's [S, d]
// matrix is a strided view with leading dimension heads * d; BLAS reads it
// in place and no transposed copies are made. The scores are computed as a
// full S x S product and the upper triangle is then masked: for the short
// sequences here (S ~ 64-128) that is cheaper than a triangular loop.

#include "backends.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu_blas.hpp"
#include "cpu_vector.hpp"

namespace tutti::kernels::cpu {

using detail::gemm;

template <class T>
void attention_forward(const stream&, const T* q, const T* k, const T* v,
                       T* out, T* probs, int64_t batch, int64_t seq,
                       int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t S = seq, d = head_dim, group = q_heads / kv_heads;
  const int64_t ldq = q_heads * d, ldk = kv_heads * d;
  const T scale = T(1.0 / std::sqrt(double(d)));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < q_heads; ++h) {
      const int64_t kh = h / group;
      const T* qh = q + b * S * ldq + h * d;
      const T* kb = k + b * S * ldk + kh * d;
      const T* vb = v + b * S * ldk + kh * d;
      T* p = probs + (b * q_heads + h) * S * S;
      // scores = scale * Q K^T
      gemm(false, true, S, S, d, scale, qh, ldq, kb, ldk, T(0), p, S);
      // Causal softmax per row (keys 0..i), max-subtracted (float: the
      // vectorised rows of cpu_vector.hpp; double: exact, sum in double);
      // masked entries become exact zeros so backward can use p directly.
      for (int64_t i = 0; i < S; ++i) {
        T* row = p + i * S;
        if constexpr (std::is_same_v<T, float>) {
          vector::causal_softmax_row(row, i + 1, S);
          continue;
        }
        T mx = row[0];
        for (int64_t j = 1; j <= i; ++j)
          mx = std::max(mx, row[j]);
        double denom = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          const double e = std::exp(double(row[j]) - double(mx));
          row[j] = T(e);
          denom += e;
        }
        const double inv = 1.0 / denom;
        for (int64_t j = 0; j <= i; ++j)
          row[j] = T(double(row[j]) * inv);
        std::fill(row + i + 1, row + S, T(0));
      }
      // out = P V
      gemm(false, false, S, d, S, T(1), p, S, vb, ldk, T(0),
           out + b * S * ldq + h * d, ldq);
    }
  }
}

// With P = softmax(scale * Q K^T) and O = P V:
//   dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),
//   dQ = scale * dS K,  dK = scale * dS^T Q,  dV = P^T dO.
// The query heads sharing a kv head add into dK/dV in head order (the first
// one writes with beta = 0, which also implements "dk, dv overwritten").
template <class T>
void attention_backward(const stream&, const T* q, const T* k, const T* v,
                        const T* probs, const T* dout, T* dq, T* dk, T* dv,
                        int64_t batch, int64_t seq, int64_t q_heads,
                        int64_t kv_heads, int64_t head_dim) {
  const int64_t S = seq, d = head_dim, group = q_heads / kv_heads;
  const int64_t ldq = q_heads * d, ldk = kv_heads * d;
  const T scale = T(1.0 / std::sqrt(double(d)));
  std::vector<T> ds(static_cast<size_t>(S * S));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < q_heads; ++h) {
      const int64_t kh = h / group;
      const T beta = (h % group == 0) ? T(0) : T(1);
      const T* qh = q + b * S * ldq + h * d;
      const T* doh = dout + b * S * ldq + h * d;
      const T* kb = k + b * S * ldk + kh * d;
      const T* vb = v + b * S * ldk + kh * d;
      const T* p = probs + (b * q_heads + h) * S * S;
      // dP = dO V^T, then the softmax backward in place, causal part only.
      gemm(false, true, S, S, d, T(1), doh, ldq, vb, ldk, T(0), ds.data(), S);
      for (int64_t i = 0; i < S; ++i) {
        const T* pr = p + i * S;
        T* r = ds.data() + i * S;
        if constexpr (std::is_same_v<T, float>) {
          vector::causal_softmax_backward_row(pr, r, i + 1, S);
          continue;
        }
        double dot = 0.0;
        for (int64_t j = 0; j <= i; ++j)
          dot += double(pr[j]) * double(r[j]);
        for (int64_t j = 0; j <= i; ++j)
          r[j] = T(double(pr[j]) * (double(r[j]) - dot));
        std::fill(r + i + 1, r + S, T(0));
      }
      gemm(false, false, S, d, S, scale, ds.data(), S, kb, ldk, T(0),
           dq + b * S * ldq + h * d, ldq);
      gemm(true, false, S, d, S, scale, ds.data(), S, qh, ldq, beta,
           dk + b * S * ldk + kh * d, ldk);
      gemm(true, false, S, d, S, T(1), p, S, doh, ldq, beta,
           dv + b * S * ldk + kh * d, ldk);
    }
  }
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_ATTENTION
#include "instantiate_ops.inc"

} // namespace tutti::kernels::cpu
