// row_quant.hpp's kernels: per row, the largest magnitude, then one pass
// that codes every element. The loops are plain so that they vectorise in
// every clone (TUTTI_CPU_CLONES); the rounding adds and subtracts
// 1.5 * 2^23 (nearest-even for |v| < 2^22), which every instruction set
// does alike.

#include "tutti/kernels/row_quant.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_vector.hpp"

namespace tutti::kernels {

namespace {

constexpr float kInt8Max = 127.0f, kFp8Max = 448.0f;

__attribute__((always_inline)) inline float round_even(float v) {
  return (v + 12582912.0f) - 12582912.0f;
}

__attribute__((always_inline)) inline uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// |v| <= 448: e4m3's code. Below 2^-6 the subnormals (steps of 2^-9,
// code 8 being the smallest normal); above, the float's exponent and top
// three mantissa bits, rounded to nearest-even on the bits below them.
__attribute__((always_inline)) inline uint8_t to_e4m3(float v) {
  const uint32_t b = bits_of(v);
  const uint32_t sign = (b >> 24) & 0x80u;
  const uint32_t mag = b & 0x7fffffffu;
  float a;
  std::memcpy(&a, &mag, sizeof a);
  const uint32_t sub = static_cast<uint32_t>(round_even(a * 512.0f));
  const uint32_t norm = ((mag + 0x7ffffu + ((mag >> 20) & 1u)) >> 20)
                        - (120u << 3);
  uint32_t code = a < 0.015625f ? sub : norm;
  code = code < 0x7eu ? code : 0x7eu;
  return static_cast<uint8_t>(sign | code);
}

std::array<float, 256> e4m3_values() {
  std::array<float, 256> v{};
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 15, m = c & 7;
    float x = e == 0 ? std::ldexp(float(m), -9)
                     : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
    if (e == 15 && m == 7)
      x = std::numeric_limits<float>::quiet_NaN();
    v[c] = (c & 0x80) ? -x : x;
  }
  return v;
}

// The row's scale: absmax / top, 0 for a row of zeros, NaN for a row
// that is not all finite (its largest exponent field all ones).
TUTTI_CPU_CLONES
float row_scale(const float* x, int64_t d, float top) {
  uint32_t largest = 0;
  for (int64_t i = 0; i < d; ++i) {
    const uint32_t mag = bits_of(x[i]) & 0x7fffffffu;
    largest = mag > largest ? mag : largest;
  }
  if ((largest & 0x7f800000u) == 0x7f800000u)
    return std::numeric_limits<float>::quiet_NaN();
  float absmax;
  std::memcpy(&absmax, &largest, sizeof absmax);
  return absmax / top;
}

TUTTI_CPU_CLONES
void code_int8(const float* x, int64_t d, float scale, int8_t* q) {
  for (int64_t i = 0; i < d; ++i) {
    float v = round_even(x[i] / scale);
    v = v < kInt8Max ? v : kInt8Max;
    v = v > -kInt8Max ? v : -kInt8Max;
    q[i] = static_cast<int8_t>(v);
  }
}

TUTTI_CPU_CLONES
void code_e4m3(const float* x, int64_t d, float scale, uint8_t* q) {
  for (int64_t i = 0; i < d; ++i) {
    float v = x[i] / scale;
    v = v < kFp8Max ? v : kFp8Max;
    v = v > -kFp8Max ? v : -kFp8Max;
    q[i] = to_e4m3(v);
  }
}

TUTTI_CPU_CLONES
void decode_int8(const int8_t* q, int64_t d, float scale, float* y) {
  for (int64_t i = 0; i < d; ++i)
    y[i] = static_cast<float>(q[i]) * scale;
}

void decode_e4m3(const uint8_t* q, int64_t d, float scale, float* y) {
  static const std::array<float, 256> values = e4m3_values();
  for (int64_t i = 0; i < d; ++i)
    y[i] = values[q[i]] * scale;
}

} // namespace

void quantize_rows(row_code code, const float* x, int64_t rows, int64_t d,
                   float* out) {
  const int64_t width = quantized_row_floats(d);
  const float top = code == row_code::int8 ? kInt8Max : kFp8Max;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * d;
    float* dst = out + r * width;
    auto* codes = reinterpret_cast<unsigned char*>(dst + 1);
    std::memset(codes, 0, (width - 1) * sizeof(float)); // codes and padding
    const float scale = row_scale(row, d, top);
    dst[0] = scale;
    // A zero row (or a scale lost below the smallest float) codes as
    // zeros; a non-finite one leaves zeros under its NaN scale.
    if (!(scale > 0.0f))
      continue;
    if (code == row_code::int8)
      code_int8(row, d, scale, reinterpret_cast<int8_t*>(codes));
    else
      code_e4m3(row, d, scale, codes);
  }
}

void dequantize_rows(row_code code, const float* in, int64_t rows, int64_t d,
                     float* out) {
  const int64_t width = quantized_row_floats(d);
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = in + r * width;
    const auto* codes = reinterpret_cast<const unsigned char*>(src + 1);
    if (code == row_code::int8)
      decode_int8(reinterpret_cast<const int8_t*>(codes), d, src[0],
                  out + r * d);
    else
      decode_e4m3(codes, d, src[0], out + r * d);
  }
}

} // namespace tutti::kernels
