// The int8-times-int8-rows product on AVX512-VNNI (Intel Cascade Lake and
// later, AMD Zen 4 and later): VPDPBUSD adds four byte products a lane in
// one instruction, 64 a register. It multiplies unsigned bytes by signed
// ones, so a row's codes go in offset by 128 (the top bit flipped) and
// every accumulator starts at -128 x its output's code sum, which cancels
// the offset exactly. This file alone is built with -mavx512f
// -mavx512vnni; cpu_int8_dot_gemm.cpp checks the CPU before calling it.

#include <immintrin.h>

#include <cstdint>

// GCC 12's _mm512_cvtepi32_ps starts from _mm512_undefined_ps(), which
// its flow analysis reports as uninitialised; every lane is written.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tutti::kernels {

namespace {

struct isa {
  using reg = __m512i;
  static constexpr int width = 16, rows = 4, strip = 4;
  static reg load(const uint32_t* p) { return _mm512_loadu_si512(p); }
  static reg start(const int32_t* sums) {
    return _mm512_mullo_epi32(_mm512_loadu_si512(sums),
                              _mm512_set1_epi32(-128));
  }
  static reg broadcast(uint32_t word) {
    return _mm512_set1_epi32(int(word ^ 0x80808080u));
  }
  static reg dot(reg acc, reg x, reg w) {
    return _mm512_dpbusd_epi32(acc, x, w);
  }
  static void store(float* y, reg acc, float row_scale, const float* scales) {
    const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc),
                                   _mm512_set1_ps(row_scale));
    _mm512_storeu_ps(y, _mm512_mul_ps(v, _mm512_loadu_ps(scales)));
  }
};

#include "int8_dot_blocks.inc"

} // namespace

int64_t int8_dot_gemm_avx512_vnni(const float* rows, int64_t width,
                                  const uint32_t* quads, const int32_t* sums,
                                  const float* scales, int64_t n,
                                  int64_t steps, float* y, int64_t ldy,
                                  int64_t m) {
  return product(rows, width, quads, sums, scales, n, steps, y, ldy, m);
}

} // namespace tutti::kernels
