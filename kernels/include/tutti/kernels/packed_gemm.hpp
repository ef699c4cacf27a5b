#pragma once
// The serving forward's matrix products, batch-invariant and batched. A
// weight w[out, in] (Hugging Face's layout) is packed once, transposed to
// [in, out], so that a vector register holds 16 neighbouring outputs of
// one row: y[i, j..j+15] = fma(w^T[t, j..j+15], x[i, t], y[i, j..j+15])
// for t = 0, 1, ... Every output is thus the same left-to-right chain of
// fused multiply-adds (each rounds once, in a vector lane or alone),
// whatever the number of rows, their order or the blocking; so a
// request's logits have the same bits alone or among 31 others. Rows go
// through in blocks that share each weight load (4 rows x 64 outputs in
// AVX-512 registers), which is what makes a batch of decodes cheaper per
// token than one: the weights are read once per step, not once per
// sequence. On a stream, kernels::invariant_linear_forward (op_list.inc)
// runs these chains on the CPU or on CUDA, with the same bits.

#include <cstdint>
#include <vector>

namespace tutti::kernels {

struct packed_matrix {
  int64_t in = 0, out = 0;
  std::vector<float> t; // [in, out]
};

// w[out, in], row-major.
packed_matrix pack_matrix(const float* w, int64_t out, int64_t in);

// y[m, w.out] = x[m, w.in] w^T, with row strides ldx and ldy.
void packed_gemm(const float* x, int64_t ldx, const packed_matrix& w, float* y,
                 int64_t ldy, int64_t m);

inline void packed_gemm(const float* x, const packed_matrix& w, float* y,
                        int64_t m) {
  packed_gemm(x, w.in, w, y, w.out, m);
}

} // namespace tutti::kernels
