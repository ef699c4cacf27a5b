// int8 matrices times int8 rows (packed_gemm.hpp, serve.activation_dtype
// int8): each output is (float(the exact integer sum of the codes'
// products) * the row's scale) * the output's scale, the rows quantized by
// row_quant.hpp's rule; the same bits from the kernel this CPU picks, the
// portable one, at every batch size; within the quantization's error of
// the float product.

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_inputs.hpp"
#include "tutti/kernels/packed_gemm.hpp"
#include "tutti/kernels/row_quant.hpp"

namespace k = tutti::kernels;

namespace {

using tutti::testing::normal_floats;
using tutti::testing::same_bits;

struct int8_case {
  int64_t out, in;
  std::vector<float> codes, scales;
  k::packed_matrix dot;
};

int8_case make(int64_t out, int64_t in, uint64_t seed) {
  int8_case c{out, in, std::vector<float>(out * in), std::vector<float>(out), {}};
  const auto w = normal_floats(out * in, seed, 0.05f);
  k::quantize_matrix_int8(w.data(), out, in, c.codes.data(), c.scales.data());
  c.dot = k::with_int8_rows(
    k::pack_matrix_int8(c.codes.data(), c.scales.data(), out, in));
  return c;
}

// The definition, one output at a time.
float defined(const int8_case& c, const float* x, int64_t j) {
  std::vector<float> row(k::quantized_row_floats(c.in));
  k::quantize_rows(k::row_code::int8, x, 1, c.in, row.data());
  const auto* codes = reinterpret_cast<const int8_t*>(row.data() + 1);
  int64_t sum = 0;
  for (int64_t t = 0; t < c.in; ++t)
    sum += int64_t(codes[t]) * int64_t(c.codes[j * c.in + t]);
  return (float(int32_t(sum)) * row[0]) * c.scales[j];
}

} // namespace

TEST_CASE("int8 rows: the defined sum's bits on every kernel and batch "
          "size, near the float product",
          "[unit]") {
  // 100 outputs: AVX-512 strips of 64 and 16 then four single outputs;
  // AVX2 strips of 16 and 8 then four. 77 inputs: a last quad of one.
  const int64_t rows = 9;
  const auto c = make(100, 77, 31);
  REQUIRE(c.dot.is_int8_dot());
  REQUIRE(c.dot.codes.empty());
  auto x = normal_floats(rows * c.in, 32, 1.0f);
  for (int64_t t = 0; t < c.in; ++t)
    x[4 * c.in + t] = 0.0f; // a zero row: zeros out
  INFO("kernel: " << k::int8_dot_gemm_kernel());
  std::vector<float> y(rows * c.out), portable(rows * c.out);
  k::packed_gemm(x.data(), c.dot, y.data(), rows);
  k::int8_dot_gemm_portable(x.data(), c.in, c.dot, portable.data(), c.out,
                            rows);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c.out; ++j) {
      INFO("row " << i << " output " << j);
      const float got = y[i * c.out + j];
      CHECK(same_bits(got, defined(c, x.data() + i * c.in, j)));
      CHECK(same_bits(portable[i * c.out + j], got));
      // Against the float product of the dequantized weights: each input
      // off by at most half its row's step (absmax / 254).
      double ref = 0, bound = 0, absmax = 0;
      for (int64_t t = 0; t < c.in; ++t)
        absmax = std::max(absmax, double(std::abs(x[i * c.in + t])));
      for (int64_t t = 0; t < c.in; ++t) {
        const double wd = double(c.codes[j * c.in + t]) * c.scales[j];
        ref += wd * x[i * c.in + t];
        bound += std::abs(wd) * absmax / 254.0;
      }
      CHECK(std::abs(double(got) - ref) <= bound * 1.001 + 1e-6);
    }
  for (int64_t j = 0; j < c.out; ++j)
    CHECK(y[4 * c.out + j] == 0.0f);
  // Every kernel this CPU can run (AVX2's too on an AVX-512 machine).
  for (const char* kernel : {"avx512_vnni", "avx2", "portable"}) {
    std::vector<float> on(rows * c.out);
    if (!k::int8_dot_gemm_on(kernel, x.data(), c.in, c.dot, on.data(), c.out,
                             rows)) {
      WARN("this CPU cannot run the " << kernel << " kernel");
      continue;
    }
    for (int64_t v = 0; v < rows * c.out; ++v) {
      INFO(kernel << " output " << v);
      CHECK(same_bits(on[v], y[v]));
    }
  }
  std::vector<float> part(rows * c.out);
  for (int64_t m = 1; m <= rows; ++m) {
    k::packed_gemm(x.data(), c.dot, part.data(), m);
    for (int64_t v = 0; v < m * c.out; ++v)
      CHECK(same_bits(part[v], y[v]));
  }
  // Strided rows and outputs, as the engine passes them.
  std::vector<float> wide(rows * (c.in + 3)), strided(rows * (c.out + 5));
  for (int64_t i = 0; i < rows; ++i)
    std::copy_n(x.data() + i * c.in, c.in, wide.data() + i * (c.in + 3));
  k::packed_gemm(wide.data(), c.in + 3, c.dot, strided.data(), c.out + 5,
                 rows);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c.out; ++j)
      CHECK(same_bits(strided[i * (c.out + 5) + j], y[i * c.out + j]));
}

TEST_CASE("int8 rows: the largest codes sum without overflow or "
          "saturation; a non-finite row comes out NaN",
          "[unit]") {
  // Every code +-127 and every row at +-absmax: the 16-bit pairs of the
  // AVX2 kernel at their largest (2 x 127 x 127), the sums at in x 127^2.
  const int64_t out = 48, in = 1024;
  int8_case c{out, in, std::vector<float>(out * in), std::vector<float>(out, 0.5f), {}};
  for (int64_t j = 0; j < out; ++j)
    for (int64_t t = 0; t < in; ++t)
      c.codes[j * in + t] = ((j + t) % 3 == 0) ? -127.0f : 127.0f;
  c.dot = k::with_int8_rows(
    k::pack_matrix_int8(c.codes.data(), c.scales.data(), out, in));
  std::vector<float> x(2 * in);
  for (int64_t t = 0; t < in; ++t)
    x[t] = (t % 3 == 0) ? -2.0f : 2.0f;
  std::vector<float> y(2 * out);
  for (const char* kernel : {"avx512_vnni", "avx2", "portable"}) {
    if (!k::int8_dot_gemm_on(kernel, x.data(), in, c.dot, y.data(), out, 1))
      continue;
    for (int64_t j = 0; j < out; ++j) {
      INFO(kernel << " output " << j);
      CHECK(same_bits(y[j], defined(c, x.data(), j)));
    }
  }
  CHECK(y[0] == float(in) * 127.0f * 127.0f * (2.0f / 127.0f) * 0.5f);
  x[in + 5] = std::numeric_limits<float>::infinity();
  k::packed_gemm(x.data(), c.dot, y.data(), 2);
  for (int64_t j = 0; j < out; ++j)
    CHECK(std::isnan(y[out + j]));
}

TEST_CASE("the int8-rows kernel is named by what the CPU has", "[unit]") {
  const auto name = k::int8_dot_gemm_kernel();
  INFO(name);
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512f"))
    CHECK(name.rfind("avx512_vnni", 0) == 0);
  else if (__builtin_cpu_supports("avx2"))
    CHECK(name.rfind("avx2", 0) == 0);
  else
    CHECK(name.rfind("portable", 0) == 0);
}
