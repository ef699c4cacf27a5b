// packed_gemm's kernels, float32, int8 and bfloat16 (in float32 FMAs, for
// CPUs without AVX512-BF16), for CPUs with AVX-512 and FMA; this file
// alone is built with -mavx512f -mfma (kernels/CMakeLists.txt), and
// cpu_packed_gemm.cpp, cpu_int8_gemm.cpp and cpu_bf16_packed_gemm.cpp
// check the CPU before calling it. Registers of 16 outputs, strips of 4 (4 rows x 4 registers: 16
// accumulators of the 32 registers); the loops are packed_gemm_blocks.inc.

#include <immintrin.h>

#include <cstdint>

#include "bf16_pairs.hpp"

namespace tutti::kernels {

namespace {

#include "packed_gemm_isa_avx512.inc"

#include "packed_gemm_blocks.inc"

} // namespace

void packed_gemm_avx512(const float* x, int64_t ldx, const float* wt,
                        int64_t n, int64_t k, float* y, int64_t ldy,
                        int64_t m) {
  product(x, ldx, float_weights{wt}, n, k, y, ldy, m);
}

void int8_gemm_avx512(const float* x, int64_t ldx, const int8_t* codes,
                      const float* scales, int64_t n, int64_t k, float* y,
                      int64_t ldy, int64_t m) {
  product(x, ldx, int8_weights{codes, scales}, n, k, y, ldy, m);
}

void bf16_gemm_avx512(const uint32_t* x, int64_t ldx, const uint32_t* pairs,
                      int64_t n, int64_t k, float* y, int64_t ldy, int64_t m) {
  product(x, ldx, bf16_weights{pairs}, n, k, y, ldy, m);
}

} // namespace tutti::kernels
