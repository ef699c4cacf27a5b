// packed_gemm's kernels, float32, int8 and bfloat16 (in float32 FMAs), for
// CPUs with AVX2 and FMA but not AVX-512 (AMD Zen 2 and 3, Intel before
// Skylake-X); this file alone is built with -mavx2 -mfma
// (kernels/CMakeLists.txt), and cpu_packed_gemm.cpp, cpu_int8_gemm.cpp and
// cpu_bf16_packed_gemm.cpp check the CPU before calling it.
// Registers of 8 outputs, blocks of 6 rows x 2 registers (12 accumulators,
// 2 weights and a broadcast in the 16 registers, as BLIS's Haswell
// micro-kernel); the loops are packed_gemm_blocks.inc,
// and the bits are the AVX-512 kernels'.

#include <immintrin.h>

#include <cstdint>

#include "bf16_pairs.hpp"

namespace tutti::kernels {

namespace {

struct isa {
  using reg = __m256;
  static constexpr int width = 8, rows = 6, strip = 2;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static reg load_codes(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static reg broadcast(float v) { return _mm256_set1_ps(v); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  // The high / low halves of a register of bfloat16 pairs as floats.
  static reg odd_halves(const uint32_t* p) {
    const auto v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));
  }
  static reg even_halves(const uint32_t* p) {
    const auto v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
};

#include "packed_gemm_blocks.inc"

} // namespace

void packed_gemm_avx2(const float* x, int64_t ldx, const float* wt, int64_t n,
                      int64_t k, float* y, int64_t ldy, int64_t m) {
  product(x, ldx, float_weights{wt}, n, k, y, ldy, m);
}

void int8_gemm_avx2(const float* x, int64_t ldx, const int8_t* codes,
                    const float* scales, int64_t n, int64_t k, float* y,
                    int64_t ldy, int64_t m) {
  product(x, ldx, int8_weights{codes, scales}, n, k, y, ldy, m);
}

void bf16_gemm_avx2(const uint32_t* x, int64_t ldx, const uint32_t* pairs,
                      int64_t n, int64_t k, float* y, int64_t ldy, int64_t m) {
  product(x, ldx, bf16_weights{pairs}, n, k, y, ldy, m);
}

} // namespace tutti::kernels
