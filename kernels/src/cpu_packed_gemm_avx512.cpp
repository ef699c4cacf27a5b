// packed_gemm's kernels, float32, int8 and bfloat16 (in float32 FMAs, for
// CPUs without AVX512-BF16), for CPUs with AVX-512 and FMA; this file
// alone is built with -mavx512f -mfma (kernels/CMakeLists.txt), and
// cpu_packed_gemm.cpp, cpu_int8_gemm.cpp and cpu_bf16_packed_gemm.cpp
// check the CPU before calling it. Registers of 16 outputs, strips of 4 (4 rows x 4 registers: 16
// accumulators of the 32 registers); the loops are packed_gemm_blocks.inc.

#include <immintrin.h>

#include <cstdint>

#include "bf16_pairs.hpp"

// GCC 12's widening intrinsics start from _mm512_undefined_*(), which its
// flow analysis reports as uninitialised; every lane is written.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tutti::kernels {

namespace {

struct isa {
  using reg = __m512;
  static constexpr int width = 16, rows = 4, strip = 4;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static reg load_codes(const int8_t* p) {
    return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static reg broadcast(float v) { return _mm512_set1_ps(v); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  // The high / low halves of a register of bfloat16 pairs as floats.
  static reg odd_halves(const uint32_t* p) {
    const auto v = _mm512_loadu_si512(p);
    return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))));
  }
  static reg even_halves(const uint32_t* p) {
    const auto v = _mm512_loadu_si512(p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
};

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
