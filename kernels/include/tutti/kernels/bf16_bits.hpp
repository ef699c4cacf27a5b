#pragma once
// One bfloat16 value as its 16 bits: the high half of a float32, so
// widening is exact, and narrowing rounds to nearest even. The kernels'
// bf16 matrices and rows and training's bf16 moments use this one rule.

#include <cstdint>
#include <cstring>

// The CUDA kernels (compiled by nvcc) round with the same functions.
#ifdef __CUDACC__
#define TUTTI_BF16_HOST_DEVICE __host__ __device__
#else
#define TUTTI_BF16_HOST_DEVICE
#endif

namespace tutti::kernels {

TUTTI_BF16_HOST_DEVICE inline float float_of_bits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

TUTTI_BF16_HOST_DEVICE inline float float_of_bf16(uint16_t bits) {
  return float_of_bits(uint32_t{bits} << 16);
}

// Round to nearest even; a subnormal becomes a zero of its sign (the
// dot-product instruction reads subnormals as zero, so both GEMM kernels
// see the same values); a NaN stays a quiet NaN. Without branches, so
// that a loop of it vectorizes.
TUTTI_BF16_HOST_DEVICE inline uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof v);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t zero = (u >> 16) & 0x8000u, quiet = (u >> 16) | 0x0040u;
  const uint32_t out = (u & 0x7f800000u) == 0          ? zero
                       : (u & 0x7fffffffu) > 0x7f800000u ? quiet
                                                         : rounded;
  return static_cast<uint16_t>(out);
}

} // namespace tutti::kernels
