// packed_gemm's bfloat16 kernel on AVX512-BF16 (AMD Zen 4 and later, Intel
// Cooper Lake and Sapphire Rapids): VDPBF16PS multiplies 16 outputs by a
// pair of inputs at once, acc += w[2p+1] x[2p+1], then acc += w[2p] x[2p],
// each sum rounded once (the products of two bfloat16 values are exact).
// packed_gemm_blocks.inc's bf16_weights computes that chain in float32
// fused multiply-adds, the same bits, for every other CPU (subnormal sums
// aside: this instruction flushes them to zero). This file alone is built
// with -mavx512f -mavx512bf16 -mfma; cpu_bf16_packed_gemm.cpp checks the
// CPU before calling it.

#include <immintrin.h>

#include <cstdint>

#include "bf16_pairs.hpp"

namespace tutti::kernels {

namespace {

#include "packed_gemm_isa_avx512.inc"

#include "packed_gemm_blocks.inc"

// The same pairs, a step of the instruction per pair (the chain's two
// fused multiply-adds in one).
struct bf16_dot_weights : bf16_weights {
  using bf16_weights::bf16_weights;
  template <int R, int C>
  void step(isa::reg (&acc)[R][C], const uint32_t* x, int64_t ldx, int64_t n,
            int64_t p, int64_t j) const {
    __m512bh wv[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
      wv[c] = (__m512bh)_mm512_loadu_si512(pairs + p * n + j + 16 * c);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const auto xv = (__m512bh)_mm512_set1_epi32(int(x[r * ldx + p]));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c)
        acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv[c], xv);
    }
  }
};

} // namespace

void bf16_gemm_avx512_bf16(const uint32_t* x, int64_t ldx,
                           const uint32_t* pairs, int64_t n, int64_t k,
                           float* y, int64_t ldy, int64_t m) {
  product(x, ldx, bf16_dot_weights{pairs}, n, k, y, ldy, m);
}

} // namespace tutti::kernels
