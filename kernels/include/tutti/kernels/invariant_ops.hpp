#pragma once
// Batch-invariant CPU kernels for the serving forward. Each output element
// is computed by the same sequence of floating-point operations whatever
// the number of rows, so a request's logits do not depend on what else is
// in its batch, nor on how its prompt was chunked. (OpenBLAS chooses its
// blocking and kernels by the matrix sizes, so the training GEMM gives a
// row different bits in a batch of 1 and of 32; that is why these are not
// kernels::linear_forward.) The matrix products are packed_gemm.hpp's;
// the row-wise ops of kernels/ops.hpp (RMSNorm, embedding, router top-k,
// SwiGLU) already are row-invariant and are reused as they are.

#include <cstdint>
#include <vector>

#include "tutti/kernels/packed_gemm.hpp"

namespace tutti::kernels {

// sum_i a[i] * b[i] in a fixed order (8 lanes, then a fixed tree).
float invariant_dot(const float* a, const float* b, int64_t n);

// Attention scores of `heads` query rows q[heads, hd] against `count` key
// rows (keys + j * key_stride): scores[h * score_stride + j] =
// invariant_dot(q + h * hd, key j, hd) * scale, those bits, eight keys at
// a time where the CPU has AVX2.
void invariant_scores(const float* q, int64_t heads, int64_t hd,
                      const float* keys, int64_t key_stride, int64_t count,
                      float scale, float* scores, int64_t score_stride);

// o[h * hd + d] += weights[h * weight_stride + j] * values[j * value_stride
// + d], over j = 0 .. count - 1 in order, for h < heads: each element's
// multiplies and adds in that order (no fused multiply-add), so a block
// of the cache at a time gives the bits of a position at a time.
void invariant_weighted_values(const float* weights, int64_t weight_stride,
                               int64_t heads, const float* values,
                               int64_t value_stride, int64_t count, int64_t hd,
                               float* o);

// `rows` rows of `n` attention scores (`stride` apart) into their
// softmax's numerators, in place: s[j] = expf(s[j] - the row's largest),
// the C library's bits, and sums[r] their sum in order.
void invariant_softmax_numerators(float* s, int64_t rows, int64_t n,
                                  int64_t stride, float* sums);

// Rotary embedding at explicit positions on q[rows, q_heads, head_dim]
// and k[rows, k_heads, head_dim], each row's angles computed once for
// both: the same rotate_half convention and angle arithmetic as
// kernels::rope_forward, which takes positions from the sequence index
// only.
void rope_at_positions(float* q, int64_t q_heads, float* k, int64_t k_heads,
                       const int64_t* positions, int64_t rows, int64_t head_dim,
                       double theta);

// One SwiGLU expert on m rows: y[m, hidden] = w2 (silu(w1 x) * (w3 x)),
// w13 = [w1; w3] packed ([hidden, 2 * intermediate]), w2 packed; every row
// batch-invariant. `ab`, `h` are scratch. The one-rank engine and the
// expert shards of expert-parallel serving both run experts through this,
// so they give the same bits.
void invariant_expert(const float* x, const packed_matrix& w13,
                      const packed_matrix& w2, float* y, int64_t m,
                      std::vector<float>& ab, std::vector<float>& h);

} // namespace tutti::kernels
