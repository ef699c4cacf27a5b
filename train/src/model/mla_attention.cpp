#include "tutti/train/mla_attention.hpp"

#include "tutti/kernels/ops.hpp"

namespace tutti::train::mla {

namespace k = tutti::kernels;

namespace {

// The rotated slice of `rows` rows (at src, `stride` apart) into the
// contiguous [rows, rope] `pe`, de-interleaved when the model interleaves.
template <class T>
void take_rotated(const k::stream& s, const dims& d, const T* src,
                  int64_t stride, int64_t rows, T* pe) {
  const int64_t r = d.rope;
  if (!d.interleave) {
    k::strided_copy(s, src, stride, int64_t{1}, pe, r, int64_t{1}, rows, r,
                    false);
    return;
  }
  k::strided_copy(s, src, stride, int64_t{2}, pe, r, int64_t{1}, rows, r / 2,
                  false);
  k::strided_copy(s, src + 1, stride, int64_t{2}, pe + r / 2, r, int64_t{1},
                  rows, r / 2, false);
}

// take_rotated's transpose: the contiguous gradients back into the slice,
// interleaved again when the model interleaves.
template <class T>
void put_rotated(const k::stream& s, const dims& d, const T* pe, T* dst,
                 int64_t stride, int64_t rows) {
  const int64_t r = d.rope;
  if (!d.interleave) {
    k::strided_copy(s, pe, r, int64_t{1}, dst, stride, int64_t{1}, rows, r,
                    false);
    return;
  }
  k::strided_copy(s, pe, r, int64_t{1}, dst, stride, int64_t{2}, rows, r / 2,
                  false);
  k::strided_copy(s, pe + r / 2, r, int64_t{1}, dst + 1, stride, int64_t{2},
                  rows, r / 2, false);
}

} // namespace

template <class T>
void acts<T>::resize(const k::stream& s, const dims& d) {
  const int64_t n = d.tokens();
  if (d.q_rank > 0) {
    q_lat.resize(s, n * d.q_rank);
    q_lat_n.resize(s, n * d.q_rank);
    rstd_q.resize(s, n);
  }
  latent.resize(s, n * d.latent());
  c.resize(s, n * d.kv_rank);
  c_n.resize(s, n * d.kv_rank);
  rstd_c.resize(s, n);
  kv.resize(s, n * d.heads * (d.nope + d.v));
}

template <class T>
void forward(const k::stream& s, const dims& d, const weights<T>& w,
             const T* xn, acts<T>& a, T* q, T* key, T* value, T* pe) {
  const int64_t n = d.tokens(), h = d.heads, qk = d.qk(), kvw = d.nope + d.v;
  const T eps = static_cast<T>(d.eps);
  if (d.q_rank > 0) {
    k::linear_forward(s, xn, w.q_a, a.q_lat.data(), n, d.hidden, d.q_rank);
    k::rmsnorm_forward(s, a.q_lat.data(), w.q_a_norm, a.q_lat_n.data(),
                       a.rstd_q.data(), n, d.q_rank, eps);
    k::linear_forward(s, a.q_lat_n.data(), w.q_b, q, n, d.q_rank, h * qk);
  } else {
    k::linear_forward(s, xn, w.q_proj, q, n, d.hidden, h * qk);
  }
  // The queries' rotated slices, rotated in place (de-interleaved first).
  take_rotated(s, d, q + d.nope, qk, n * h, pe);
  k::rope_forward(s, pe, d.batch, d.seq, h, d.rope, d.theta);
  k::strided_copy(s, pe, d.rope, int64_t{1}, q + d.nope, qk, int64_t{1}, n * h,
                  d.rope, false);

  k::linear_forward(s, xn, w.kv_a, a.latent.data(), n, d.hidden, d.latent());
  k::strided_copy(s, a.latent.data(), d.latent(), int64_t{1}, a.c.data(),
                  d.kv_rank, int64_t{1}, n, d.kv_rank, false);
  k::rmsnorm_forward(s, a.c.data(), w.kv_a_norm, a.c_n.data(), a.rstd_c.data(),
                     n, d.kv_rank, eps);
  k::linear_forward(s, a.c_n.data(), w.kv_b, a.kv.data(), n, d.kv_rank,
                    h * kvw);
  // Keys: each head's k_nope, then the one rotated key of the token.
  k::strided_copy(s, a.kv.data(), kvw, int64_t{1}, key, qk, int64_t{1}, n * h,
                  d.nope, false);
  take_rotated(s, d, a.latent.data() + d.kv_rank, d.latent(), n, pe);
  k::rope_forward(s, pe, d.batch, d.seq, int64_t{1}, d.rope, d.theta);
  for (int64_t i = 0; i < h; ++i)
    k::strided_copy(s, pe, d.rope, int64_t{1}, key + i * qk + d.nope, h * qk,
                    int64_t{1}, n, d.rope, false);
  // Values, zero past v_head_dim.
  k::fill_zero(s, value, n * h * qk);
  k::strided_copy(s, a.kv.data() + d.nope, kvw, int64_t{1}, value, qk,
                  int64_t{1}, n * h, d.v, false);
}

template <class T>
void pack_output(const k::stream& s, const dims& d, const T* attn, T* out) {
  k::strided_copy(s, attn, d.qk(), int64_t{1}, out, d.v, int64_t{1},
                  d.tokens() * d.heads, d.v, false);
}

template <class T>
void unpack_output_grad(const k::stream& s, const dims& d, const T* dout,
                        T* dattn) {
  const int64_t rows = d.tokens() * d.heads;
  k::fill_zero(s, dattn, rows * d.qk());
  k::strided_copy(s, dout, d.v, int64_t{1}, dattn, d.qk(), int64_t{1}, rows,
                  d.v, false);
}

template <class T>
void backward(const k::stream& s, const dims& d, const weights<T>& w,
              const T* xn, const acts<T>& a, T* dq, const T* dk, const T* dv,
              const grads<T>& g, scratch<T>& tmp, T* dxn) {
  const int64_t n = d.tokens(), h = d.heads, qk = d.qk(), kvw = d.nope + d.v;
  tmp.pe.resize(s, n * h * d.rope);
  tmp.dkv.resize(s, n * h * kvw);
  tmp.dlatent.resize(s, n * d.latent());
  tmp.dc_n.resize(s, n * d.kv_rank);
  tmp.dc.resize(s, n * d.kv_rank);
  T* pe = tmp.pe.data();

  // Queries: the rotation undone on the rotated slices, in place.
  k::strided_copy(s, dq + d.nope, qk, int64_t{1}, pe, d.rope, int64_t{1}, n * h,
                  d.rope, false);
  k::rope_backward(s, pe, d.batch, d.seq, h, d.rope, d.theta);
  put_rotated(s, d, pe, dq + d.nope, qk, n * h);
  if (d.q_rank > 0) {
    tmp.dq_lat_n.resize(s, n * d.q_rank);
    tmp.dq_lat.resize(s, n * d.q_rank);
    k::linear_backward(s, a.q_lat_n.data(), w.q_b, dq, tmp.dq_lat_n.data(),
                       g.q_b, n, d.q_rank, h * qk);
    k::rmsnorm_backward(s, a.q_lat.data(), w.q_a_norm, a.rstd_q.data(),
                        tmp.dq_lat_n.data(), tmp.dq_lat.data(), g.q_a_norm, n,
                        d.q_rank);
    k::linear_backward(s, xn, w.q_a, tmp.dq_lat.data(), dxn, g.q_a, n, d.hidden,
                       d.q_rank);
  } else {
    k::linear_backward(s, xn, w.q_proj, dq, dxn, g.q_proj, n, d.hidden, h * qk);
  }

  // Keys and values: kv_b_proj's output gradient per head.
  k::strided_copy(s, dk, qk, int64_t{1}, tmp.dkv.data(), kvw, int64_t{1}, n * h,
                  d.nope, false);
  k::strided_copy(s, dv, qk, int64_t{1}, tmp.dkv.data() + d.nope, kvw,
                  int64_t{1}, n * h, d.v, false);
  // The shared rotated key: its heads' gradients summed in head order.
  k::fill_zero(s, pe, n * d.rope);
  for (int64_t i = 0; i < h; ++i)
    k::strided_copy(s, dk + i * qk + d.nope, h * qk, int64_t{1}, pe, d.rope,
                    int64_t{1}, n, d.rope, true);
  k::rope_backward(s, pe, d.batch, d.seq, int64_t{1}, d.rope, d.theta);
  put_rotated(s, d, pe, tmp.dlatent.data() + d.kv_rank, d.latent(), n);

  k::linear_backward(s, a.c_n.data(), w.kv_b, tmp.dkv.data(), tmp.dc_n.data(),
                     g.kv_b, n, d.kv_rank, h * kvw);
  k::rmsnorm_backward(s, a.c.data(), w.kv_a_norm, a.rstd_c.data(),
                      tmp.dc_n.data(), tmp.dc.data(), g.kv_a_norm, n,
                      d.kv_rank);
  k::strided_copy(s, tmp.dc.data(), d.kv_rank, int64_t{1}, tmp.dlatent.data(),
                  d.latent(), int64_t{1}, n, d.kv_rank, false);
  // kv_a_proj_with_mqa reads the same input as the query: its input
  // gradient is added to the query's in the GEMM.
  k::linear_input_grad(s, w.kv_a, tmp.dlatent.data(), dxn, n, d.hidden,
                       d.latent(), true);
  k::linear_weight_grad_rows(s, xn, tmp.dlatent.data(), g.kv_a, n, d.hidden,
                             d.latent(), int64_t{0}, d.latent());
}

#define TUTTI_MLA_INSTANTIATE(T)                                               \
  template struct acts<T>;                                                     \
  template void forward<T>(const k::stream&, const dims&, const weights<T>&,   \
                           const T*, acts<T>&, T*, T*, T*, T*);                \
  template void pack_output<T>(const k::stream&, const dims&, const T*, T*);   \
  template void unpack_output_grad<T>(const k::stream&, const dims&, const T*, \
                                      T*);                                     \
  template void backward<T>(const k::stream&, const dims&, const weights<T>&,  \
                            const T*, const acts<T>&, T*, const T*, const T*,  \
                            const grads<T>&, scratch<T>&, T*);

TUTTI_MLA_INSTANTIATE(float)
TUTTI_MLA_INSTANTIATE(double)

#undef TUTTI_MLA_INSTANTIATE

} // namespace tutti::train::mla
