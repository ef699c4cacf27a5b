// The int8-times-int8-rows product on AVX2 without VNNI (AMD Zen 2 and 3,
// Intel before Ice Lake): VPMADDUBSW multiplies |w| (unsigned) by the
// row's code carrying w's sign (VPSIGNB) and adds pairs into 16 bits,
// which cannot saturate (2 x 127 x 127 < 2^15; neither code is -128),
// then VPMADDWD adds the pairs into the 32-bit lane: the four products,
// exactly, as VNNI's instruction. This file alone is built with -mavx2;
// cpu_int8_dot_gemm.cpp checks the CPU before calling it.

#include <immintrin.h>

#include <cstdint>

namespace tutti::kernels {

namespace {

struct isa {
  using reg = __m256i;
  static constexpr int width = 8, rows = 4, strip = 2;
  static reg load(const uint32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static reg start(const int32_t*) { return _mm256_setzero_si256(); }
  static reg broadcast(uint32_t word) { return _mm256_set1_epi32(int(word)); }
  static reg dot(reg acc, reg x, reg w) {
    const reg pairs =
      _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  static void store(float* y, reg acc, float row_scale, const float* scales) {
    const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc),
                                   _mm256_set1_ps(row_scale));
    _mm256_storeu_ps(y, _mm256_mul_ps(v, _mm256_loadu_ps(scales)));
  }
};

#include "int8_dot_blocks.inc"

} // namespace

int64_t int8_dot_gemm_avx2(const float* rows, int64_t width,
                           const uint32_t* quads, const int32_t* sums,
                           const float* scales, int64_t n, int64_t steps,
                           float* y, int64_t ldy, int64_t m) {
  return product(rows, width, quads, sums, scales, n, steps, y, ldy, m);
}

} // namespace tutti::kernels
