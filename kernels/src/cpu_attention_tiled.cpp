// Causal grouped-query attention, tiled (flash attention), forward and
// backward, one (batch, head) at a time with BLAS GEMMs on tiles.
//
// Forward: for each tile of query rows, the key tiles up to the diagonal in
// order, with a running maximum m and sum l per row: each tile's scores are
// exponentiated against the new maximum, and what was accumulated so far
// (l and the output rows) is rescaled by exp(m_old - m_new). The output is
// acc / l and the row keeps lse = m + log(l), so the backward pass can
// rebuild any probability as exp(score - lse) without the [s, s] matrix.
//
// Backward (per kv head, each key tile j, then the group's query heads and
// the query tiles from j on, in that fixed order):
//   P = exp(scale Q K^T - lse),  dV += P^T dO,  dP = dO V^T,
//   dS = P * (dP - D) with D = rowsum(dO * O) (= rowsum(P * dP)),
//   dQ += scale dS K,  dK += scale dS^T Q.
// Memory: a few kTile x kTile and kTile x head_dim buffers, whatever the
// sequence length.

#include "backends.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_blas.hpp"

namespace tutti::kernels::cpu {

using detail::gemm;

namespace {

constexpr int64_t kTile = 64; // query rows and key columns per tile

struct tiled_shape {
  int64_t S, hq, hkv, d;
  int64_t ldq() const { return hq * d; }
  int64_t ldk() const { return hkv * d; }
  int64_t group() const { return hq / hkv; }
};

// The scores of query rows i0.. and key columns j0.. (a rows x cols tile,
// row stride kTile), with the causally masked ones (key after query)
// marked by `masked`.
template <class T>
void tile_scores(const T* qh, const T* kb, const tiled_shape& sh, int64_t i0,
                 int64_t rows, int64_t j0, int64_t cols, T scale, T masked,
                 T* sc) {
  gemm(false, true, rows, cols, sh.d, scale, qh + i0 * sh.ldq(), sh.ldq(),
       kb + j0 * sh.ldk(), sh.ldk(), T(0), sc, kTile);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = std::max<int64_t>(0, i0 + r - j0 + 1); c < cols; ++c)
      sc[r * kTile + c] = masked;
}

} // namespace

template <class T>
void attention_forward_tiled(const stream&, const T* q, const T* k, const T* v,
                             T* out, T* lse, int64_t batch, int64_t seq,
                             int64_t q_heads, int64_t kv_heads,
                             int64_t head_dim) {
  const tiled_shape sh{seq, q_heads, kv_heads, head_dim};
  const int64_t S = seq, d = head_dim, ldq = sh.ldq(), ldk = sh.ldk();
  const T scale = T(1.0 / std::sqrt(double(d)));
  const T minus_inf = -std::numeric_limits<T>::infinity();
  std::vector<T> sc(kTile * kTile), acc(kTile * d), m(kTile), l(kTile);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < q_heads; ++h) {
      const int64_t kh = h / sh.group();
      const T* qh = q + b * S * ldq + h * d;
      const T* kb = k + b * S * ldk + kh * d;
      const T* vb = v + b * S * ldk + kh * d;
      for (int64_t i0 = 0; i0 < S; i0 += kTile) {
        const int64_t rows = std::min(kTile, S - i0);
        std::fill(acc.begin(), acc.end(), T(0));
        std::fill(m.begin(), m.end(), minus_inf);
        std::fill(l.begin(), l.end(), T(0));
        for (int64_t j0 = 0; j0 < i0 + rows; j0 += kTile) {
          const int64_t cols = std::min(kTile, i0 + rows - j0);
          tile_scores(qh, kb, sh, i0, rows, j0, cols, scale, minus_inf,
                      sc.data());
          for (int64_t r = 0; r < rows; ++r) {
            T* row = sc.data() + r * kTile;
            T mx = m[r];
            for (int64_t c = 0; c < cols; ++c)
              mx = std::max(mx, row[c]);
            // Row r has at least key 0 in the first tile, so mx is finite.
            const T alpha = std::exp(m[r] - mx);
            T sum = T(0);
            for (int64_t c = 0; c < cols; ++c) {
              row[c] = std::exp(row[c] - mx); // masked: exp(-inf) = 0
              sum += row[c];
            }
            l[r] = l[r] * alpha + sum;
            m[r] = mx;
            if (alpha != T(1))
              for (int64_t c = 0; c < d; ++c)
                acc[r * d + c] *= alpha;
          }
          gemm(false, false, rows, d, cols, T(1), sc.data(), kTile,
               vb + j0 * ldk, ldk, T(1), acc.data(), d);
        }
        for (int64_t r = 0; r < rows; ++r) {
          T* o = out + (b * S + i0 + r) * ldq + h * d;
          const T inv = T(1) / l[r];
          for (int64_t c = 0; c < d; ++c)
            o[c] = acc[r * d + c] * inv;
          lse[(b * q_heads + h) * S + i0 + r] = m[r] + std::log(l[r]);
        }
      }
    }
}

template <class T>
void attention_backward_tiled(const stream&, const T* q, const T* k,
                              const T* v, const T* out, const T* lse,
                              const T* dout, T* dq, T* dk, T* dv,
                              int64_t batch, int64_t seq, int64_t q_heads,
                              int64_t kv_heads, int64_t head_dim) {
  const tiled_shape sh{seq, q_heads, kv_heads, head_dim};
  const int64_t S = seq, d = head_dim, ldq = sh.ldq(), ldk = sh.ldk();
  const int64_t group = sh.group();
  const T scale = T(1.0 / std::sqrt(double(d)));
  const T minus_inf = -std::numeric_limits<T>::infinity();
  std::vector<T> p(kTile * kTile), ds(kTile * kTile), dk_acc(kTile * d),
    dv_acc(kTile * d), rowdot(group * S);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t kh = 0; kh < kv_heads; ++kh) {
      const T* kb = k + b * S * ldk + kh * d;
      const T* vb = v + b * S * ldk + kh * d;
      // D = rowsum(dO * O) for the group's heads; dQ is summed over key
      // tiles, so it starts at zero.
      for (int64_t g = 0; g < group; ++g)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t at = (b * S + i) * ldq + (kh * group + g) * d;
          double dot = 0.0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(dout[at + c]) * double(out[at + c]);
          rowdot[g * S + i] = T(dot);
          std::fill(dq + at, dq + at + d, T(0));
        }
      for (int64_t j0 = 0; j0 < S; j0 += kTile) {
        const int64_t cols = std::min(kTile, S - j0);
        std::fill(dk_acc.begin(), dk_acc.end(), T(0));
        std::fill(dv_acc.begin(), dv_acc.end(), T(0));
        for (int64_t g = 0; g < group; ++g) {
          const int64_t h = kh * group + g;
          const T* qh = q + b * S * ldq + h * d;
          const T* doh = dout + b * S * ldq + h * d;
          T* dqh = dq + b * S * ldq + h * d;
          const T* lse_h = lse + (b * q_heads + h) * S;
          // Query tiles start on the diagonal: tiles are aligned, so the
          // first one holding a row >= j0 starts at j0.
          for (int64_t i0 = j0; i0 < S; i0 += kTile) {
            const int64_t rows = std::min(kTile, S - i0);
            tile_scores(qh, kb, sh, i0, rows, j0, cols, scale, minus_inf,
                        p.data());
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t c = 0; c < cols; ++c)
                p[r * kTile + c] = std::exp(p[r * kTile + c] - lse_h[i0 + r]);
            // dV += P^T dO
            gemm(true, false, cols, d, rows, T(1), p.data(), kTile,
                 doh + i0 * ldq, ldq, T(1), dv_acc.data(), d);
            // dS = P * (dO V^T - D)
            gemm(false, true, rows, cols, d, T(1), doh + i0 * ldq, ldq,
                 vb + j0 * ldk, ldk, T(0), ds.data(), kTile);
            for (int64_t r = 0; r < rows; ++r) {
              const T dr = rowdot[g * S + i0 + r];
              for (int64_t c = 0; c < cols; ++c)
                ds[r * kTile + c] = p[r * kTile + c] * (ds[r * kTile + c] - dr);
            }
            gemm(false, false, rows, d, cols, scale, ds.data(), kTile,
                 kb + j0 * ldk, ldk, T(1), dqh + i0 * ldq, ldq);
            gemm(true, false, cols, d, rows, scale, ds.data(), kTile,
                 qh + i0 * ldq, ldq, T(1), dk_acc.data(), d);
          }
        }
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t x = 0; x < d; ++x) {
            dk[(b * S + j0 + c) * ldk + kh * d + x] = dk_acc[c * d + x];
            dv[(b * S + j0 + c) * ldk + kh * d + x] = dv_acc[c * d + x];
          }
      }
    }
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_ATTENTION_TILED
#include "instantiate_ops.inc"

} // namespace tutti::kernels::cpu
