// packed_gemm.hpp's int8 matrices: packing, quantizing, the portable
// kernel and the choice of kernel by what the CPU has. Every output is
// scale[j] * (a left-to-right chain of fused multiply-adds of float(code)
// and x over the inner dimension); the AVX-512 kernel
// and AVX2 kernels (cpu_packed_gemm_avx512.cpp, cpu_packed_gemm_avx2.cpp)
// compute the same chains in vector lanes, so all give the same bits,
// whatever the number of rows.

#include <cmath>
#include <cstring>

#include "tutti/kernels/packed_gemm.hpp"
#include "tutti/kernels/row_quant.hpp"

namespace tutti::kernels {

// cpu_packed_gemm_avx512.cpp and cpu_packed_gemm_avx2.cpp
void int8_gemm_avx512(const float* x, int64_t ldx, const int8_t* codes,
                      const float* scales, int64_t n, int64_t k, float* y,
                      int64_t ldy, int64_t m);
void int8_gemm_avx2(const float* x, int64_t ldx, const int8_t* codes,
                    const float* scales, int64_t n, int64_t k, float* y,
                    int64_t ldy, int64_t m);

packed_matrix pack_matrix_int8(const float* codes, const float* scales,
                               int64_t out, int64_t in) {
  packed_matrix p;
  p.in = in;
  p.out = out;
  p.codes.resize(in * out);
  p.scales.assign(scales, scales + out);
  for (int64_t j = 0; j < out; ++j)
    for (int64_t t = 0; t < in; ++t)
      p.codes[t * out + j] = static_cast<int8_t>(codes[j * in + t]);
  return p;
}

void quantize_matrix_int8(const float* w, int64_t out, int64_t in,
                          float* codes, float* scales) {
  // One row at a time through the dispatch's row quantizer: its rule, and
  // no second copy of the matrix.
  const int64_t row_floats = quantized_row_floats(in);
  std::vector<float> row(row_floats);
  for (int64_t j = 0; j < out; ++j) {
    quantize_rows(row_code::int8, w + j * in, 1, in, row.data());
    scales[j] = row[0];
    const auto* q = reinterpret_cast<const int8_t*>(row.data() + 1);
    for (int64_t t = 0; t < in; ++t)
      codes[j * in + t] = q[t];
  }
}

namespace {

bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

bool has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// Without AVX2 and FMA: one output at a time, the same chain (std::fma
// rounds once, as the instruction does).
void portable_kernel(const float* x, int64_t ldx, const int8_t* codes,
                     const float* scales, int64_t n, int64_t k, float* y,
                     int64_t ldy, int64_t m) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t)
        acc = std::fma(float(codes[t * n + j]), x[i * ldx + t], acc);
      y[i * ldy + j] = acc * scales[j];
    }
}

} // namespace

void int8_gemm(const float* x, int64_t ldx, const packed_matrix& w, float* y,
               int64_t ldy, int64_t m) {
  static const auto kernel = has_avx512() ? int8_gemm_avx512
                             : has_avx2() ? int8_gemm_avx2
                                          : portable_kernel;
  if (m > 0)
    kernel(x, ldx, w.codes.data(), w.scales.data(), w.out, w.in, y, ldy, m);
}

void int8_gemm_portable(const float* x, int64_t ldx, const packed_matrix& w,
                        float* y, int64_t ldy, int64_t m) {
  portable_kernel(x, ldx, w.codes.data(), w.scales.data(), w.out, w.in, y, ldy,
                  m);
}

std::string int8_gemm_kernel() {
  if (has_avx512())
    return "avx512 (the CPU has avx512f and fma)";
  if (has_avx2())
    return "avx2 (the CPU has avx2 and fma, no avx512f)";
  return std::string("portable (no ")
         + (__builtin_cpu_supports("fma") ? "avx2" : "fma") + ")";
}

std::string cpu_capabilities() {
  std::string has, lacks;
  auto add = [&](bool present, const char* name) {
    std::string& list = present ? has : lacks;
    list += (list.empty() ? "" : " ") + std::string(name);
  };
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512vnni"), "avx512_vnni");
  add(__builtin_cpu_supports("avx512bf16"), "avx512_bf16");
  add(__builtin_cpu_supports("amx-tile"), "amx");
  return (has.empty() ? "none" : has) + (lacks.empty() ? "" : ", no " + lacks);
}

} // namespace tutti::kernels
