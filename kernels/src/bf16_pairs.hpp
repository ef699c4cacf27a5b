#pragma once
// bfloat16 values two to a 32-bit word, as packed_gemm's bf16 matrices and
// their rows hold them: element 2p in the low half, 2p + 1 in the high
// half, the order AVX512-BF16's dot-product instruction reads. A bfloat16
// is the high half of a float32, so widening one is exact.

#include <cstdint>
#include <cstring>

namespace tutti::kernels {

inline float float_of_bits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

inline float odd_half(uint32_t pair) {
  return float_of_bits(pair & 0xffff0000u);
}

inline float even_half(uint32_t pair) { return float_of_bits(pair << 16); }

// Round to nearest even; a subnormal becomes a zero of its sign (the
// dot-product instruction reads subnormals as zero, so both kernels see
// the same values); a NaN stays a quiet NaN. Without branches, so that a
// loop of it vectorizes.
inline uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof v);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t zero = (u >> 16) & 0x8000u, quiet = (u >> 16) | 0x0040u;
  const uint32_t out = (u & 0x7f800000u) == 0          ? zero
                       : (u & 0x7fffffffu) > 0x7f800000u ? quiet
                                                         : rounded;
  return static_cast<uint16_t>(out);
}

inline uint32_t bf16_pair(float even, float odd) {
  return uint32_t{bf16_bits(even)} | uint32_t{bf16_bits(odd)} << 16;
}

} // namespace tutti::kernels
