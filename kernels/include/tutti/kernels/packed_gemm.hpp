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
//
// A matrix may instead be held in 8 bits (serve.weight_dtype: int8):
// weight-only, symmetric, one float32 scale per output (w[j, t] = code[t,
// j] * scale[j]). The product keeps float32 activations and accumulation:
// y[i, j] = scale[j] * (the same chain of fused multiply-adds over
// float(code[t, j]) * x[i, t]), the conversion of a code to float exact,
// so it is as batch-invariant as the float32 product and its bits are the
// same on every path (cpu_int8_gemm.cpp, cpu_packed_gemm_*.cpp). The CPU
// only.
//
// An int8 matrix may also multiply int8 rows (serve.activation_dtype:
// int8, W8A8): each row quantized as the dispatch quantizes its rows
// (row_quant.hpp: scale = absmax / 127, codes rounded to nearest even),
// the codes' products summed in 32-bit integers, exactly, then y[i, j] =
// (float(sum) * row_scale[i]) * scale[j]. An exact integer sum has one
// value whatever the order, so the bits are the same on every path
// (VNNI's VPDPBUSD, AVX2's VPMADDUBSW, the portable loop) and at every
// batch size (cpu_int8_dot_gemm.cpp).
//
// Or in bfloat16 (serve.weight_dtype: bf16): the weights rounded to
// bfloat16 (nearest even) and kept two to a 32-bit word along the inner
// dimension, the rows rounded to bfloat16 when multiplied. Each output is
// the chain of AVX512-BF16's dot-product instruction: per pair of inputs,
// acc += w[2p+1] x[2p+1], then acc += w[2p] x[2p], each sum rounded once
// (a product of two bfloat16 values is exact in float32). CPUs without the
// instruction compute the same chain in float32 fused multiply-adds, with
// the same bits (cpu_bf16_packed_gemm.cpp); as batch-invariant as the
// rest.

#include <cstdint>
#include <string>
#include <vector>

namespace tutti::kernels {

struct packed_matrix {
  int64_t in = 0, out = 0;
  std::vector<float> t; // [in, out]; empty when the matrix is int8
  std::vector<int8_t> codes; // [in, out] when int8
  std::vector<float> scales; // [out] when int8
  // [(in + 1) / 2, out] when bfloat16: w[j, 2p] in the low half of word
  // [p, j], w[j, 2p + 1] (or 0) in the high half.
  std::vector<uint32_t> bf16_pairs;
  // [(in + 3) / 4, out] when int8 with int8 rows: w[j, 4q .. 4q + 3] in
  // the bytes of word [q, j] (zeros past `in`); code_sums[j] their sum
  // over the inner dimension; scales as for int8.
  std::vector<uint32_t> int8_quads;
  std::vector<int32_t> code_sums;
  bool is_int8() const { return !codes.empty(); }
  bool is_int8_dot() const { return !int8_quads.empty(); }
  bool is_bf16() const { return !bf16_pairs.empty(); }
};

// w[out, in], row-major.
packed_matrix pack_matrix(const float* w, int64_t out, int64_t in);

// codes[out, in] (row-major, each in [-127, 127], as a float or an int8
// checkpoint holds them) and scales[out].
packed_matrix pack_matrix_int8(const float* codes, const float* scales,
                               int64_t out, int64_t in);

// w[out, in], row-major, rounded to bfloat16 (nearest even; subnormals to
// zero, as the bf16 instructions read them).
packed_matrix pack_matrix_bf16(const float* w, int64_t out, int64_t in);

// An int8 matrix (pack_matrix_int8) repacked to multiply int8 rows: its
// codes as quads, the float rows quantized per row at every product.
packed_matrix with_int8_rows(packed_matrix int8);

// Quantizes w[out, in] per output row, symmetric: scale = absmax / 127,
// code = round-to-nearest-even(w / scale), as kernels::quantize_rows
// (row_quant.hpp) does for the dispatch's rows. codes[out, in] (as
// floats; may be w itself), scales[out].
void quantize_matrix_int8(const float* w, int64_t out, int64_t in,
                          float* codes, float* scales);

// Which kernel the int8 product runs on this CPU and why ("avx512 (the
// CPU has avx512f and fma)", "avx2 (...)" or "portable (no fma)"), and
// what the CPU
// offers for low precision ("avx512f fma avx512_vnni avx512_bf16, no
// amx").
std::string int8_gemm_kernel();
// The same for bfloat16 matrices: "avx512_bf16 (the CPU has avx512_bf16)",
// or which float32 kernel runs the same chain and why.
std::string bf16_gemm_kernel();
// The same for int8 matrices times int8 rows: "avx512_vnni (...)",
// "avx2 (...)" or "portable (...)".
std::string int8_dot_gemm_kernel();
std::string cpu_capabilities();

// The portable kernels alone (float32, int8 and bfloat16), what CPUs without AVX2
// and FMA run (packed_gemm picks them there): callable anywhere, so that
// tests check they give the bits of the kernel this CPU picks.
void int8_gemm_portable(const float* x, int64_t ldx, const packed_matrix& w,
                        float* y, int64_t ldy, int64_t m);
void bf16_gemm_portable(const float* x, int64_t ldx, const packed_matrix& w,
                        float* y, int64_t ldy, int64_t m);
void int8_dot_gemm_portable(const float* x, int64_t ldx,
                            const packed_matrix& w, float* y, int64_t ldy,
                            int64_t m);
// The int8-rows product on a named kernel ("avx512_vnni", "avx2",
// "portable"), where this CPU has it; false (y untouched) where not. So
// that tests check every kernel the CPU can run gives the same bits.
bool int8_dot_gemm_on(const std::string& kernel, const float* x, int64_t ldx,
                      const packed_matrix& w, float* y, int64_t ldy,
                      int64_t m);
void packed_gemm_portable_float(const float* x, int64_t ldx,
                                const packed_matrix& w, float* y, int64_t ldy,
                                int64_t m);

// y[m, w.out] = x[m, w.in] w^T, with row strides ldx and ldy.
void packed_gemm(const float* x, int64_t ldx, const packed_matrix& w, float* y,
                 int64_t ldy, int64_t m);

inline void packed_gemm(const float* x, const packed_matrix& w, float* y,
                        int64_t m) {
  packed_gemm(x, w.in, w, y, w.out, m);
}

} // namespace tutti::kernels
