#pragma once
// bfloat16 values two to a 32-bit word, as packed_gemm's bf16 matrices and
// their rows hold them: element 2p in the low half, 2p + 1 in the high
// half, the order AVX512-BF16's dot-product instruction reads (each one
// as bf16_bits.hpp rounds it).

#include <cstdint>

#include "tutti/kernels/bf16_bits.hpp"

namespace tutti::kernels {

inline float odd_half(uint32_t pair) {
  return float_of_bits(pair & 0xffff0000u);
}

inline float even_half(uint32_t pair) { return float_of_bits(pair << 16); }

inline uint32_t bf16_pair(float even, float odd) {
  return uint32_t{bf16_bits(even)} | uint32_t{bf16_bits(odd)} << 16;
}

} // namespace tutti::kernels
