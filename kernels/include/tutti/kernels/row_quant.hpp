#pragma once
// 8-bit rows, as the MoE dispatch sends them (moe_config.dispatch_dtype):
// each row of d floats becomes one float32 scale and d one-byte codes,
// quantized per row (per token), as DeepSeek-V3 dispatches in FP8.
//
//   int8      code = round-to-nearest-even(x / scale), scale = absmax / 127
//   fp8_e4m3  code = x / scale in OCP e4m3 (4 exponent bits, 3 mantissa
//             bits, no infinities, largest 448), nearest-even, scale =
//             absmax / 448
//
// A quantized row is the scale, then the codes, padded to whole floats:
// quantized_row_floats(d) floats, so that the exchanges move it as a row
// of floats, bits untouched. A row of zeros has scale 0 and comes back
// zeros; a row holding a NaN or an infinity (all_finite's classification:
// exponent bits all ones) gets a NaN scale and comes back all NaN, so the
// non-finite guards downstream still see it. CPU memory only; the same
// bits on every instruction set (the arithmetic is one IEEE division or
// multiplication per element, no fused operations).

#include <cstdint>

namespace tutti::kernels {

enum class row_code { int8, fp8_e4m3 };

// Floats one quantized row of d elements takes: a scale and d bytes.
constexpr int64_t quantized_row_floats(int64_t d) { return 1 + (d + 3) / 4; }

// x [rows, d] into out [rows, quantized_row_floats(d)].
void quantize_rows(row_code code, const float* x, int64_t rows, int64_t d,
                   float* out);
// in [rows, quantized_row_floats(d)] back into out [rows, d].
void dequantize_rows(row_code code, const float* in, int64_t rows, int64_t d,
                     float* out);

} // namespace tutti::kernels
