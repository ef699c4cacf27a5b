// The bfloat16 weight product (packed_gemm.hpp, serve.weight_dtype bf16):
// rounding to bfloat16, the product against float64 of the rounded values,
// and its batch invariance: a row's bits alone, among others and at every
// batch size are the same, and are those of the chain the header defines
// (per pair, the odd product then the even one, each a fused
// multiply-add) and of the portable kernel, whichever kernel this CPU
// picks (AVX512-BF16's dot product, or float32 FMAs).

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernel_inputs.hpp"
#include "tutti/kernels/packed_gemm.hpp"

namespace k = tutti::kernels;

namespace {

using tutti::testing::normal_floats;
using tutti::testing::same_bits;

uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

float float_of(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// bfloat16 by the header's rule, as a float: nearest even, subnormals to
// a signed zero.
float to_bf16(float v) {
  if (std::fpclassify(v) == FP_SUBNORMAL)
    return std::signbit(v) ? -0.0f : 0.0f;
  const uint32_t u = bits_of(v);
  return float_of(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
}

// The weight of output j at input t as the packed matrix holds it.
float packed_weight(const k::packed_matrix& p, int64_t j, int64_t t) {
  const uint32_t pair = p.bf16_pairs[(t / 2) * p.out + j];
  return float_of(t % 2 ? pair & 0xffff0000u : pair << 16);
}

} // namespace

TEST_CASE("bf16 weights: rounded to nearest even, subnormals to zero",
          "[unit]") {
  const float tie_down = float_of(0x3f808000u); // 1 + 2^-8: ties to 1
  const float tie_up = float_of(0x3f818000u);   // ties to the even 1 + 2^-6
  const float subnormal = std::numeric_limits<float>::denorm_min() * 5;
  const std::vector<float> w{1.0f, tie_down, tie_up, -subnormal, 3.14159f};
  const auto p = k::pack_matrix_bf16(w.data(), 1, 5);
  REQUIRE(p.is_bf16());
  REQUIRE(p.bf16_pairs.size() == 3); // pairs along the inner dimension
  CHECK(packed_weight(p, 0, 0) == 1.0f);
  CHECK(packed_weight(p, 0, 1) == 1.0f);
  CHECK(bits_of(packed_weight(p, 0, 2)) == 0x3f820000u);
  CHECK(bits_of(packed_weight(p, 0, 3)) == 0x80000000u); // -0
  CHECK(packed_weight(p, 0, 4) == to_bf16(3.14159f));
  CHECK((p.bf16_pairs[2] >> 16) == 0); // the odd input's padding
}

TEST_CASE("bf16 product against float64 of the rounded values, the same "
          "bits at every batch size, on every kernel",
          "[unit]") {
  // 100 outputs: strips of 64 and of 16, then four single outputs; an odd
  // inner dimension (the last pair padded).
  const int64_t out = 100, in = 77, rows = 9;
  const auto w = normal_floats(out * in, 11, 0.05f);
  const auto x = normal_floats(rows * in, 12, 1.0f);
  const auto p = k::pack_matrix_bf16(w.data(), out, in);
  INFO("kernel: " << k::bf16_gemm_kernel());
  std::vector<float> y(rows * out), portable(rows * out);
  k::packed_gemm(x.data(), p, y.data(), rows);
  k::bf16_gemm_portable(x.data(), in, p, portable.data(), out, rows);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double ref = 0, magnitude = 0;
      float chain = 0.0f;
      for (int64_t t = 0; t < in; t += 2) {
        const float w_odd = t + 1 < in ? packed_weight(p, j, t + 1) : 0.0f;
        const float x_odd = t + 1 < in ? to_bf16(x[i * in + t + 1]) : 0.0f;
        const float w_even = packed_weight(p, j, t);
        const float x_even = to_bf16(x[i * in + t]);
        chain = std::fma(w_odd, x_odd, chain);
        chain = std::fma(w_even, x_even, chain);
        ref += double(w_odd) * x_odd + double(w_even) * x_even;
        magnitude += std::abs(double(w_odd) * x_odd)
                     + std::abs(double(w_even) * x_even);
      }
      const float got = y[i * out + j];
      CHECK(same_bits(got, chain));
      CHECK(same_bits(got, portable[i * out + j]));
      CHECK(std::abs(got - ref) <= 1e-6 * magnitude + 1e-30);
      // And within bfloat16's rounding of the float32 weights and rows.
      double exact = 0;
      for (int64_t t = 0; t < in; ++t)
        exact += double(w[j * in + t]) * x[i * in + t];
      CHECK(std::abs(got - exact) <= 2 * 0.0079 * magnitude);
    }
  // Every batch size gives each row the bits it has alone.
  for (int64_t m = 1; m <= rows; ++m) {
    std::vector<float> part(m * out);
    k::packed_gemm(x.data() + (rows - m) * in, p, part.data(), m);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < out; ++j)
        CHECK(same_bits(part[i * out + j], y[(rows - m + i) * out + j]));
  }
}

TEST_CASE("bf16 product: the kernel is named with what the CPU has",
          "[unit]") {
  const auto kernel = k::bf16_gemm_kernel();
  if (__builtin_cpu_supports("avx512bf16"))
    CHECK(kernel.rfind("avx512_bf16", 0) == 0);
  else
    CHECK(kernel.rfind("avx512_bf16", 0) != 0);
  WARN("bf16 kernel here: " << kernel);
}
