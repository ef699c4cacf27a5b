// The int8 weight product (packed_gemm.hpp, serve.weight_dtype int8):
// per-channel quantization's rule, the product against a float64
// reference of the dequantized weights, and its batch invariance: a row's
// bits alone, among others and at every batch size are the same, and are
// those of the chain the header defines (scale * fma chain) and of the
// portable kernel CPUs without AVX2 run. The float32 product likewise.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_inputs.hpp"
#include "tutti/kernels/packed_gemm.hpp"

namespace k = tutti::kernels;

namespace {

using tutti::testing::normal_floats;
using tutti::testing::same_bits;

} // namespace

TEST_CASE("int8 weights: per-channel codes within half a step, the "
          "extremes at +-127",
          "[unit]") {
  const int64_t out = 5, in = 70;
  auto w = normal_floats(out * in, 3, 0.02f);
  for (int64_t t = 0; t < in; ++t)
    w[2 * in + t] = 0.0f; // a row of zeros: scale 0, codes 0
  std::vector<float> codes(out * in), scales(out);
  k::quantize_matrix_int8(w.data(), out, in, codes.data(), scales.data());
  CHECK(scales[2] == 0.0f);
  for (int64_t j = 0; j < out; ++j) {
    float absmax = 0.0f, top = 0.0f;
    for (int64_t t = 0; t < in; ++t) {
      const float c = codes[j * in + t];
      CHECK(c == std::nearbyint(c));
      CHECK(std::abs(c) <= 127.0f);
      absmax = std::max(absmax, std::abs(w[j * in + t]));
      top = std::max(top, std::abs(c));
      CHECK(std::abs(c * scales[j] - w[j * in + t]) <= 0.5001f * scales[j]);
    }
    CHECK(scales[j] == absmax / 127.0f);
    CHECK(top == (j == 2 ? 0.0f : 127.0f));
  }
}

TEST_CASE("int8 product against float64 of the dequantized weights, the "
          "same bits at every batch size",
          "[unit]") {
  // 100 outputs: strips of 64 and of 16, then four single outputs.
  const int64_t out = 100, in = 77, rows = 9;
  auto w = normal_floats(out * in, 11, 0.05f);
  auto x = normal_floats(rows * in, 12, 1.0f);
  std::vector<float> codes(out * in), scales(out);
  k::quantize_matrix_int8(w.data(), out, in, codes.data(), scales.data());
  const auto p = k::pack_matrix_int8(codes.data(), scales.data(), out, in);
  REQUIRE(p.is_int8());
  REQUIRE(p.t.empty());
  INFO("kernel: " << k::int8_gemm_kernel());
  std::vector<float> y(rows * out);
  k::packed_gemm(x.data(), p, y.data(), rows);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double ref = 0, magnitude = 0;
      float chain = 0.0f;
      for (int64_t t = 0; t < in; ++t) {
        const double wd = double(codes[j * in + t]) * double(scales[j]);
        ref += wd * double(x[i * in + t]);
        magnitude += std::abs(wd * double(x[i * in + t]));
        chain = std::fma(codes[j * in + t], x[i * in + t], chain);
      }
      const float got = y[i * out + j];
      INFO("row " << i << " output " << j);
      // float32 accumulation over `in` terms, one scale multiply.
      CHECK(std::abs(double(got) - ref)
            <= double(in + 2) * 0x1p-24 * magnitude + 1e-30);
      CHECK(same_bits(got, chain * scales[j]));
    }
  // The portable kernel (CPUs without AVX2) gives the same bits.
  std::vector<float> portable(rows * out);
  k::int8_gemm_portable(x.data(), in, p, portable.data(), out, rows);
  for (int64_t v = 0; v < rows * out; ++v)
    CHECK(same_bits(portable[v], y[v]));
  // Every row alone, and every batch size from the first row, gives the
  // same bits as the batch of nine.
  std::vector<float> part(rows * out);
  for (int64_t m = 1; m <= rows; ++m) {
    k::packed_gemm(x.data(), p, part.data(), m);
    for (int64_t v = 0; v < m * out; ++v)
      CHECK(same_bits(part[v], y[v]));
  }
  for (int64_t i = 0; i < rows; ++i) {
    k::packed_gemm(x.data() + i * in, p, part.data(), 1);
    for (int64_t j = 0; j < out; ++j)
      CHECK(same_bits(part[j], y[i * out + j]));
  }
}

TEST_CASE("float32 weights: the chain the header defines, the portable "
          "kernel's bits, the same bits at every batch size",
          "[unit]") {
  // 100 outputs: AVX-512 strips of 64 and 16 then four single outputs;
  // AVX2 strips of 16 and 8 then four.
  const int64_t out = 100, in = 77, rows = 9;
  const auto w = normal_floats(out * in, 21, 0.05f);
  const auto x = normal_floats(rows * in, 22, 1.0f);
  const auto p = k::pack_matrix(w.data(), out, in);
  std::vector<float> y(rows * out), portable(rows * out), part(rows * out);
  k::packed_gemm(x.data(), p, y.data(), rows);
  k::packed_gemm_portable_float(x.data(), in, p, portable.data(), out, rows);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < out; ++j) {
      float chain = 0.0f;
      for (int64_t t = 0; t < in; ++t)
        chain = std::fma(w[j * in + t], x[i * in + t], chain);
      INFO("row " << i << " output " << j);
      CHECK(same_bits(y[i * out + j], chain));
      CHECK(same_bits(portable[i * out + j], chain));
    }
  for (int64_t m = 1; m <= rows; ++m) {
    k::packed_gemm(x.data(), p, part.data(), m);
    for (int64_t v = 0; v < m * out; ++v)
      CHECK(same_bits(part[v], y[v]));
  }
}

TEST_CASE("the int8 kernel and the CPU's capabilities are named",
          "[unit]") {
  const auto kernel = k::int8_gemm_kernel();
  CHECK((kernel.rfind("avx512", 0) == 0 || kernel.rfind("avx2", 0) == 0
         || kernel.rfind("portable", 0) == 0));
  const auto caps = k::cpu_capabilities();
  CHECK(caps.find("amx") != std::string::npos);
  WARN("int8 kernel: " << kernel << "; CPU: " << caps);
}
