// The dispatch's 8-bit rows (row_quant.hpp): the round trip's error per
// element within the format's bound, zero rows, non-finite rows, the
// codes' extremes and the row layout.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tutti/kernels/row_quant.hpp"

namespace k = tutti::kernels;

namespace {

std::vector<float> round_trip(k::row_code code, const std::vector<float>& x,
                              int64_t rows, int64_t d) {
  std::vector<float> wire(rows * k::quantized_row_floats(d), -1.0f);
  std::vector<float> back(rows * d, -1.0f);
  k::quantize_rows(code, x.data(), rows, d, wire.data());
  k::dequantize_rows(code, wire.data(), rows, d, back.data());
  return back;
}

// Rows of widely different magnitudes, some with exact zeros, values
// spanning e4m3's subnormals within a row.
std::vector<float> mixed_rows(int64_t rows, int64_t d) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * d);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < d; ++i) {
      const float magnitude = std::ldexp(1.0f, int(r % 40) - 20);
      const float spread = std::ldexp(1.0f, -int(i % 14));
      x[r * d + i] = i % 11 == 0 ? 0.0f : normal(gen) * magnitude * spread;
    }
  return x;
}

float absmax(const float* row, int64_t d) {
  float m = 0;
  for (int64_t i = 0; i < d; ++i)
    m = std::max(m, std::abs(row[i]));
  return m;
}

} // namespace

TEST_CASE("row_quant: a row is its scale and d bytes, in whole floats",
          "[unit]") {
  CHECK(k::quantized_row_floats(64) == 17);
  CHECK(k::quantized_row_floats(4096) * 4 == 4096 + 4);
  CHECK(k::quantized_row_floats(1) == 2);
  CHECK(k::quantized_row_floats(5) == 3);
}

TEST_CASE("row_quant int8: every element within absmax / 254 of its row",
          "[unit]") {
  for (int64_t d : {1, 7, 64, 67}) {
    const int64_t rows = 80;
    const auto x = mixed_rows(rows, d);
    const auto y = round_trip(k::row_code::int8, x, rows, d);
    for (int64_t r = 0; r < rows; ++r) {
      // Half a step, and a few float roundings of the division and product.
      const float bound = absmax(&x[r * d], d) / 254.0f * (1.0f + 1e-5f);
      for (int64_t i = 0; i < d; ++i) {
        INFO("d " << d << " row " << r << " element " << i << ": "
                  << x[r * d + i] << " came back " << y[r * d + i]);
        REQUIRE(std::abs(y[r * d + i] - x[r * d + i]) <= bound);
      }
    }
  }
}

TEST_CASE("row_quant fp8 e4m3: relative 2^-4, or half a subnormal step",
          "[unit]") {
  for (int64_t d : {1, 7, 64, 67}) {
    const int64_t rows = 80;
    const auto x = mixed_rows(rows, d);
    const auto y = round_trip(k::row_code::fp8_e4m3, x, rows, d);
    for (int64_t r = 0; r < rows; ++r) {
      const float scale = absmax(&x[r * d], d) / 448.0f;
      for (int64_t i = 0; i < d; ++i) {
        const float v = x[r * d + i];
        // Normals carry 3 mantissa bits (half a step: 2^-4 relative);
        // subnormals are steps of 2^-9 scale.
        const float bound = (std::ldexp(std::abs(v), -4)
                             + std::ldexp(scale, -10))
                            * (1.0f + 1e-5f);
        INFO("d " << d << " row " << r << " element " << i << ": " << v
                  << " came back " << y[r * d + i]);
        REQUIRE(std::abs(y[r * d + i] - v) <= bound);
      }
    }
  }
}

TEST_CASE("row_quant: the extremes come back exactly", "[unit]") {
  // The row's absmax is the top code (127, or e4m3's 448) times the
  // scale; powers of two within e4m3's range are exact.
  const std::vector<float> x{-3.0f, 3.0f, 1.5f, 0.0f};
  auto y = round_trip(k::row_code::int8, x, 1, 4);
  CHECK(y[0] == -3.0f);
  CHECK(y[1] == 3.0f);
  CHECK(y[3] == 0.0f);
  const std::vector<float> p{448.0f, 1.0f, -0.5f, std::ldexp(1.0f, -9)};
  y = round_trip(k::row_code::fp8_e4m3, p, 1, 4);
  CHECK(y == p);
}

TEST_CASE("row_quant: zero rows stay zero, their neighbours untouched",
          "[unit]") {
  for (auto code : {k::row_code::int8, k::row_code::fp8_e4m3}) {
    std::vector<float> x(3 * 8, 0.0f);
    x[2 * 8 + 3] = 5.0f;
    x[8 + 1] = -0.0f;
    const auto y = round_trip(code, x, 3, 8);
    for (int64_t i = 0; i < 16; ++i)
      CHECK(y[i] == 0.0f);
    CHECK(y[2 * 8 + 3] == 5.0f);
  }
}

TEST_CASE("row_quant: a row with NaN or inf comes back all NaN, alone",
          "[unit]") {
  // As all_finite classifies them: the non-finite row stays non-finite
  // (the NaN guards downstream see it), the others are unharmed.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto code : {k::row_code::int8, k::row_code::fp8_e4m3})
    for (float bad : {inf, -inf, nan}) {
      std::vector<float> x{1.0f, bad, 2.0f, 3.0f, 1.0f, 2.0f, 4.0f, 0.5f};
      const auto y = round_trip(code, x, 2, 4);
      for (int i = 0; i < 4; ++i)
        CHECK(std::isnan(y[i]));
      CHECK(y[6] == 4.0f);
      CHECK(std::isfinite(y[4]));
    }
}

TEST_CASE("row_quant: the same input gives the same bytes", "[unit]") {
  const int64_t rows = 40, d = 64;
  const auto x = mixed_rows(rows, d);
  for (auto code : {k::row_code::int8, k::row_code::fp8_e4m3}) {
    std::vector<float> a(rows * k::quantized_row_floats(d), 1.0f),
      b(a.size(), 2.0f);
    k::quantize_rows(code, x.data(), rows, d, a.data());
    k::quantize_rows(code, x.data(), rows, d, b.data());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
}
