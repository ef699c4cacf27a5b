// packed_gemm.hpp's int8 matrices times int8 rows (W8A8): the repacking
// into quads, the rows' quantization (row_quant.hpp's rule, as the
// dispatch's rows), the portable kernel and the choice of kernel by what
// the CPU has. Every output is (float(the exact integer sum of the codes'
// products) * the row's scale) * the output's scale, on every path.

#include <string>
#include <vector>

#include "tutti/kernels/packed_gemm.hpp"
#include "tutti/kernels/row_quant.hpp"

namespace tutti::kernels {

// cpu_int8_dot_gemm_avx512vnni.cpp and cpu_int8_dot_gemm_avx2.cpp: whole
// registers of outputs; they return the first column left.
int64_t int8_dot_gemm_avx512_vnni(const float* rows, int64_t width,
                                  const uint32_t* quads, const int32_t* sums,
                                  const float* scales, int64_t n,
                                  int64_t steps, float* y, int64_t ldy,
                                  int64_t m);
int64_t int8_dot_gemm_avx2(const float* rows, int64_t width,
                           const uint32_t* quads, const int32_t* sums,
                           const float* scales, int64_t n, int64_t steps,
                           float* y, int64_t ldy, int64_t m);

packed_matrix with_int8_rows(packed_matrix p) {
  if (!p.is_int8())
    return p;
  const int64_t n = p.out, steps = (p.in + 3) / 4;
  p.int8_quads.assign(steps * n, 0u);
  p.code_sums.assign(n, 0);
  for (int64_t t = 0; t < p.in; ++t)
    for (int64_t j = 0; j < n; ++j) {
      const int8_t c = p.codes[t * n + j];
      p.int8_quads[(t / 4) * n + j] |= uint32_t(uint8_t(c)) << (8 * (t % 4));
      p.code_sums[j] += c;
    }
  std::vector<int8_t>().swap(p.codes);
  return p;
}

namespace {

bool has_vnni() {
  return __builtin_cpu_supports("avx512vnni")
         && __builtin_cpu_supports("avx512f");
}

bool has_avx2() { return __builtin_cpu_supports("avx2"); }

int32_t dot_words(uint32_t a, uint32_t b) {
  int32_t sum = 0;
  for (int byte = 0; byte < 4; ++byte)
    sum += int32_t(int8_t(a >> (8 * byte))) * int32_t(int8_t(b >> (8 * byte)));
  return sum;
}

// Columns [from, n): one output at a time.
void columns(const float* rows, int64_t width, const packed_matrix& w,
             float* y, int64_t ldy, int64_t m, int64_t from) {
  const int64_t n = w.out, steps = (w.in + 3) / 4;
  for (int64_t i = 0; i < m; ++i) {
    const float* row = rows + i * width;
    const auto* x = reinterpret_cast<const uint32_t*>(row + 1);
    for (int64_t j = from; j < n; ++j) {
      int32_t acc = 0;
      for (int64_t q = 0; q < steps; ++q)
        acc += dot_words(x[q], w.int8_quads[q * n + j]);
      y[i * ldy + j] = (float(acc) * row[0]) * w.scales[j];
    }
  }
}

using dot_kernel = int64_t (*)(const float*, int64_t, const uint32_t*,
                               const int32_t*, const float*, int64_t, int64_t,
                               float*, int64_t, int64_t);

void run(dot_kernel kernel, const float* x, int64_t ldx,
         const packed_matrix& w, float* y, int64_t ldy, int64_t m) {
  if (m <= 0)
    return;
  // Each row quantized once for every output: its scale, then its codes
  // as words (zeros past `in`, which the quads' zeros meet).
  const int64_t width = quantized_row_floats(w.in);
  thread_local std::vector<float> rows;
  rows.resize(m * width);
  for (int64_t i = 0; i < m; ++i)
    quantize_rows(row_code::int8, x + i * ldx, 1, w.in, rows.data() + i * width);
  const int64_t from =
    kernel ? kernel(rows.data(), width, w.int8_quads.data(),
                    w.code_sums.data(), w.scales.data(), w.out,
                    (w.in + 3) / 4, y, ldy, m)
           : 0;
  columns(rows.data(), width, w, y, ldy, m, from);
}

} // namespace

void int8_dot_gemm(const float* x, int64_t ldx, const packed_matrix& w,
                   float* y, int64_t ldy, int64_t m) {
  static const dot_kernel kernel = has_vnni()   ? int8_dot_gemm_avx512_vnni
                                   : has_avx2() ? int8_dot_gemm_avx2
                                                : nullptr;
  run(kernel, x, ldx, w, y, ldy, m);
}

void int8_dot_gemm_portable(const float* x, int64_t ldx,
                            const packed_matrix& w, float* y, int64_t ldy,
                            int64_t m) {
  run(nullptr, x, ldx, w, y, ldy, m);
}

bool int8_dot_gemm_on(const std::string& kernel, const float* x, int64_t ldx,
                      const packed_matrix& w, float* y, int64_t ldy,
                      int64_t m) {
  if (kernel == "portable")
    run(nullptr, x, ldx, w, y, ldy, m);
  else if (kernel == "avx2" && has_avx2())
    run(int8_dot_gemm_avx2, x, ldx, w, y, ldy, m);
  else if (kernel == "avx512_vnni" && has_vnni())
    run(int8_dot_gemm_avx512_vnni, x, ldx, w, y, ldy, m);
  else
    return false;
  return true;
}

std::string int8_dot_gemm_kernel() {
  if (has_vnni())
    return "avx512_vnni (the CPU has avx512_vnni)";
  if (has_avx2())
    return "avx2 (no avx512_vnni: vpmaddubsw of the codes, the same sums)";
  return "portable (no avx2)";
}

} // namespace tutti::kernels
