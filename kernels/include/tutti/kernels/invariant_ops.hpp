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

// Rotary embedding at explicit positions on x[rows, heads, head_dim]: the
// same rotate_half convention and angle arithmetic as kernels::rope_forward,
// which takes positions from the sequence index only.
void rope_at_positions(float* x, const int64_t* positions, int64_t rows,
                       int64_t heads, int64_t head_dim, double theta);

// One SwiGLU expert on m rows: y[m, hidden] = w2 (silu(w1 x) * (w3 x)),
// w13 = [w1; w3] packed ([hidden, 2 * intermediate]), w2 packed; every row
// batch-invariant. `ab`, `h` are scratch. The one-rank engine and the
// expert shards of expert-parallel serving both run experts through this,
// so they give the same bits.
void invariant_expert(const float* x, const packed_matrix& w13,
                      const packed_matrix& w2, float* y, int64_t m,
                      std::vector<float>& ab, std::vector<float>& h);

} // namespace tutti::kernels
