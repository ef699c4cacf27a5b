#pragma once
// Multi-head latent attention (DeepSeek-V3's MLA) up to and from the
// attention core, as Hugging Face's DeepseekV3Attention computes it:
//
//   query  q_proj(x), or q_b_proj(RMSNorm(q_a_proj(x)))    [heads, nope+rope]
//   latent kv_a_proj_with_mqa(x) = [c, k_pe]               [rank + rope]
//   keys, values  kv_b_proj(RMSNorm(c)) = [k_nope, v]      [heads, nope+v]
//   key = [k_nope, rope(k_pe)] (one rotated key for all heads),
//   query = [q_nope, rope(q_pe)]; with rope_interleave the rotated slices are
//   first de-interleaved (x[0::2] then x[1::2]).
//
// The attention core (kernels' attention_forward / _tiled, one head size)
// runs on [heads, nope+rope] queries, keys and values: each value head is
// zero past v_head_dim, so the output's first v_head_dim values of a head
// are the attention's and the rest zeros (pack_output takes them).
//
// Only kernel ops: the same code on every device, in float for training
// and in double for the gradient check. Templated on the element type.

#include <cstdint>

#include "tutti/kernels/stream.hpp"
#include "tutti/kernels/tensor.hpp"

namespace tutti::train::mla {

struct dims {
  int64_t batch = 0, seq = 0; // sequences, positions of each
  int64_t hidden = 0;
  int64_t heads = 0;   // the heads computed here (a TP rank's)
  int64_t q_rank = 0;  // 0: one q_proj
  int64_t kv_rank = 0; // the latent's width
  int64_t nope = 0, rope = 0, v = 0;
  double theta = 10000.0;
  bool interleave = false;
  double eps = 1e-6;

  int64_t tokens() const { return batch * seq; }
  int64_t qk() const { return nope + rope; }
  int64_t latent() const { return kv_rank + rope; }
};

template <class T>
struct weights {
  const T* q_proj = nullptr; // without q_rank
  const T *q_a = nullptr, *q_a_norm = nullptr, *q_b = nullptr;
  const T *kv_a = nullptr, *kv_a_norm = nullptr, *kv_b = nullptr;
};

// Added to (+=). q_a, q_a_norm, kv_a and kv_a_norm see all heads: a TP
// rank's are partial.
template <class T>
struct grads {
  T* q_proj = nullptr;
  T *q_a = nullptr, *q_a_norm = nullptr, *q_b = nullptr;
  T *kv_a = nullptr, *kv_a_norm = nullptr, *kv_b = nullptr;
};

// What the forward keeps for the backward (besides q, k, v).
template <class T>
struct acts {
  kernels::tensor<T> q_lat, q_lat_n, rstd_q; // [n, q_rank], [n]
  kernels::tensor<T> latent;                 // [n, kv_rank + rope]
  kernels::tensor<T> c, c_n, rstd_c;         // [n, kv_rank], [n]
  kernels::tensor<T> kv;                     // [n, heads, nope + v]

  void resize(const kernels::stream& s, const dims& d);
};

// Backward's working buffers.
template <class T>
struct scratch {
  kernels::tensor<T> pe; // [n, heads, rope]
  kernels::tensor<T> dkv, dlatent, dc_n, dc, dq_lat_n, dq_lat;
};

// From the normed input xn [n, hidden] to the attention core's q, k, v
// ([n, heads, nope + rope] each). `pe`: [n, heads, rope] scratch.
template <class T>
void forward(const kernels::stream& s, const dims& d, const weights<T>& w,
             const T* xn, acts<T>& a, T* q, T* k, T* v, T* pe);

// The core's output [n, heads, nope + rope] -> [n, heads * v] (o_proj's
// input), and o_proj's input gradient back into the core's layout (zeros
// past v).
template <class T>
void pack_output(const kernels::stream& s, const dims& d, const T* attn,
                 T* out);
template <class T>
void unpack_output_grad(const kernels::stream& s, const dims& d, const T* dout,
                        T* dattn);

// From the core's dq, dk, dv (dq is overwritten) to the gradient of xn
// (overwritten), adding the weights' gradients to g.
template <class T>
void backward(const kernels::stream& s, const dims& d, const weights<T>& w,
              const T* xn, const acts<T>& a, T* dq, const T* dk, const T* dv,
              const grads<T>& g, scratch<T>& tmp, T* dxn);

} // namespace tutti::train::mla
