// Rounding float32 rows to bfloat16 with AVX512-BF16's conversion
// (VCVTNE2PS2BF16: nearest even, NaN kept; like every AVX512-BF16 op it
// reads float32 subnormals as zero and writes none). Built for AVX-512
// BF16 and called only where oneDNN runs bf16 GEMMs, which needs it.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tutti::kernels::detail {

void round_rows_to_bf16(const float* src, int64_t rows, int64_t cols,
                        int64_t ld, uint16_t* dst, int64_t dst_ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = src + r * ld;
    uint16_t* out = dst + r * dst_ld;
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + c + 16),
                                             _mm512_loadu_ps(in + c));
      _mm512_storeu_si512(out + c, reinterpret_cast<const __m512i&>(v));
    }
    if (c < cols) { // the tail, through a masked load of up to 32 floats
      const int64_t left = cols - c;
      const __mmask16 lo = left >= 16 ? 0xffff : (1u << left) - 1;
      const __mmask16 hi = left > 16 ? (1u << (left - 16)) - 1 : 0;
      const __m512bh v = _mm512_cvtne2ps_pbh(
        _mm512_maskz_loadu_ps(hi, in + c + 16),
        _mm512_maskz_loadu_ps(lo, in + c));
      uint16_t tail[32];
      _mm512_storeu_si512(tail, reinterpret_cast<const __m512i&>(v));
      std::memcpy(out + c, tail, left * sizeof(uint16_t));
    }
  }
}

} // namespace tutti::kernels::detail
