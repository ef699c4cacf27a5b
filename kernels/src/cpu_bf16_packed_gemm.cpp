// packed_gemm.hpp's bfloat16 matrices: packing, the rows' rounding, the
// portable kernel and the choice of kernel by what the CPU has. Every
// output is a chain over the inner dimension's pairs, acc = fma(odd weight,
// odd input, acc) then the even ones, of bfloat16 values (exact products):
// AVX512-BF16's VDPBF16PS where the CPU has it
// (cpu_packed_gemm_avx512bf16.cpp), else the same chain in float32 fused
// multiply-adds (cpu_packed_gemm_avx512.cpp, cpu_packed_gemm_avx2.cpp,
// here), with the same bits whatever the number of rows.

#include <cmath>
#include <vector>

#include "bf16_pairs.hpp"
#include "tutti/kernels/packed_gemm.hpp"

namespace tutti::kernels {

// cpu_packed_gemm_avx512bf16.cpp, cpu_packed_gemm_avx512.cpp and
// cpu_packed_gemm_avx2.cpp
void bf16_gemm_avx512_bf16(const uint32_t* x, int64_t ldx,
                           const uint32_t* pairs, int64_t n, int64_t k,
                           float* y, int64_t ldy, int64_t m);
void bf16_gemm_avx512(const uint32_t* x, int64_t ldx, const uint32_t* pairs,
                      int64_t n, int64_t k, float* y, int64_t ldy, int64_t m);
void bf16_gemm_avx2(const uint32_t* x, int64_t ldx, const uint32_t* pairs,
                    int64_t n, int64_t k, float* y, int64_t ldy, int64_t m);

packed_matrix pack_matrix_bf16(const float* w, int64_t out, int64_t in) {
  packed_matrix p;
  p.in = in;
  p.out = out;
  const int64_t pairs = (in + 1) / 2;
  p.bf16_pairs.resize(pairs * out);
  for (int64_t j = 0; j < out; ++j)
    for (int64_t q = 0; q < pairs; ++q) {
      const float* row = w + j * in;
      const float odd = 2 * q + 1 < in ? row[2 * q + 1] : 0.0f;
      p.bf16_pairs[q * out + j] = bf16_pair(row[2 * q], odd);
    }
  return p;
}

namespace {

bool has_avx512_bf16() {
  return __builtin_cpu_supports("avx512bf16")
         && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

bool has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// Without AVX2 and FMA: one output at a time, the same chain.
void portable_kernel(const uint32_t* x, int64_t ldx, const uint32_t* pairs,
                     int64_t n, int64_t k, float* y, int64_t ldy, int64_t m) {
  const int64_t steps = (k + 1) / 2;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t q = 0; q < steps; ++q) {
        const uint32_t w = pairs[q * n + j], v = x[i * ldx + q];
        acc = std::fma(odd_half(w), odd_half(v), acc);
        acc = std::fma(even_half(w), even_half(v), acc);
      }
      y[i * ldy + j] = acc;
    }
}

using bf16_kernel = void (*)(const uint32_t*, int64_t, const uint32_t*,
                             int64_t, int64_t, float*, int64_t, int64_t);

void run(bf16_kernel kernel, const float* x, int64_t ldx,
         const packed_matrix& w, float* y, int64_t ldy, int64_t m) {
  if (m <= 0)
    return;
  // The rows rounded to bfloat16 once, for every output: an even number
  // of values a row (a zero after an odd last one), which read as 32-bit
  // words on this little-endian CPU are the pairs.
  const int64_t steps = (w.in + 1) / 2;
  thread_local std::vector<uint32_t> rows;
  rows.resize(m * steps);
  auto* halves = reinterpret_cast<uint16_t*>(rows.data());
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * ldx;
    uint16_t* out = halves + i * 2 * steps;
    for (int64_t t = 0; t < w.in; ++t)
      out[t] = bf16_bits(row[t]);
    if (w.in % 2)
      out[w.in] = 0;
  }
  kernel(rows.data(), steps, w.bf16_pairs.data(), w.out, w.in, y, ldy, m);
}

} // namespace

void bf16_gemm(const float* x, int64_t ldx, const packed_matrix& w, float* y,
               int64_t ldy, int64_t m) {
  static const bf16_kernel kernel = has_avx512_bf16() ? bf16_gemm_avx512_bf16
                                    : has_avx512()    ? bf16_gemm_avx512
                                    : has_avx2()      ? bf16_gemm_avx2
                                                      : portable_kernel;
  run(kernel, x, ldx, w, y, ldy, m);
}

void bf16_gemm_portable(const float* x, int64_t ldx, const packed_matrix& w,
                        float* y, int64_t ldy, int64_t m) {
  run(portable_kernel, x, ldx, w, y, ldy, m);
}

std::string bf16_gemm_kernel() {
  if (has_avx512_bf16())
    return "avx512_bf16 (the CPU has avx512_bf16)";
  if (has_avx512())
    return "avx512 (no avx512_bf16: float32 FMAs of the bf16 values, the "
           "same bits)";
  if (has_avx2())
    return "avx2 (no avx512_bf16: float32 FMAs of the bf16 values, the same "
           "bits)";
  return "portable (no avx2 or fma)";
}

} // namespace tutti::kernels
