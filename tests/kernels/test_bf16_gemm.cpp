// gemm_precision::bf16 on the CPU: the linear ops through oneDNN, against a
// float64 product of the bf16-rounded inputs (within float32 accumulation),
// in every transpose the ops use, accumulating and not, repeatable to the
// bit and the same from any thread. Where oneDNN finds no bf16 units
// (run a second time under ONEDNN_MAX_CPU_ISA=AVX2 by CTest) the same calls
// are the float32 ops' bits.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "tutti/kernels/ops.hpp"

namespace k = tutti::kernels;

namespace {

// bfloat16 by round to nearest even, back in a float.
double bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(gen);
  return v;
}

k::stream bf16_stream() {
  auto s = k::cpu_stream();
  s.gemm = k::gemm_precision::bf16;
  return s;
}

// y = x w^T, the forward, against float64 over the rounded inputs: each
// output within float32 accumulation of sum |x||w| (k terms).
void check_forward(int64_t m, int64_t kk, int64_t n) {
  const auto x = random_values(m * kk, 1), w = random_values(n * kk, 2);
  std::vector<float> y(m * n), y32(m * n);
  k::linear_forward(bf16_stream(), x.data(), w.data(), y.data(), m, kk, n);
  k::linear_forward(k::cpu_stream(), x.data(), w.data(), y32.data(), m, kk, n);
  if (!k::cpu_bf16_support().runs_bf16) {
    CHECK(y == y32); // the float32 fallback, to the bit
    return;
  }
  double worst = 0;
  bool differs = false;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, scale = 0;
      for (int64_t p = 0; p < kk; ++p) {
        const double t = bf16(x[i * kk + p]) * bf16(w[j * kk + p]);
        ref += t;
        scale += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(y[i * n + j] - ref) / scale);
      differs = differs || y[i * n + j] != y32[i * n + j];
    }
  INFO(m << "x" << kk << "x" << n);
  CHECK(worst < 2e-6);
  CHECK(differs); // it did round to bf16
}

} // namespace

TEST_CASE("bf16 GEMMs say what runs them", "[unit]") {
  const auto s = k::cpu_bf16_support();
  std::printf("oneDNN instruction set: %s; bf16 GEMMs %s\n", s.isa,
              s.runs_bf16 ? "on bf16 units" : "fall back to float32");
  CHECK(std::strlen(s.isa) > 0);
}

TEST_CASE("bf16 linear forward against float64 over rounded inputs", "[unit]") {
  check_forward(1, 16, 8);
  check_forward(37, 64, 48);
  check_forward(128, 256, 96);
  check_forward(5, 3, 7); // k below a bf16 pair
}

TEST_CASE("bf16 linear backward: input and weight gradients", "[unit]") {
  const int64_t m = 29, kk = 40, n = 24;
  const auto x = random_values(m * kk, 3), w = random_values(n * kk, 4),
             dy = random_values(m * n, 5);
  const auto dw0 = random_values(n * kk, 6); // accumulated into
  std::vector<float> dx(m * kk), dw = dw0;
  k::linear_backward(bf16_stream(), x.data(), w.data(), dy.data(), dx.data(),
                     dw.data(), m, kk, n);
  std::vector<float> dx32(m * kk), dw32 = dw0;
  k::linear_backward(k::cpu_stream(), x.data(), w.data(), dy.data(),
                     dx32.data(), dw32.data(), m, kk, n);
  if (!k::cpu_bf16_support().runs_bf16) {
    CHECK(dx == dx32);
    CHECK(dw == dw32);
    return;
  }
  double worst_dx = 0, worst_dw = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < kk; ++p) { // dx = dy w
      double ref = 0, scale = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double t = bf16(dy[i * n + j]) * bf16(w[j * kk + p]);
        ref += t;
        scale += std::fabs(t);
      }
      worst_dx = std::max(worst_dx, std::fabs(dx[i * kk + p] - ref) / scale);
    }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < kk; ++p) { // dw += dy^T x
      double ref = dw0[j * kk + p], scale = std::fabs(ref);
      for (int64_t i = 0; i < m; ++i) {
        const double t = bf16(dy[i * n + j]) * bf16(x[i * kk + p]);
        ref += t;
        scale += std::fabs(t);
      }
      worst_dw = std::max(worst_dw, std::fabs(dw[j * kk + p] - ref) / scale);
    }
  CHECK(worst_dx < 2e-6);
  CHECK(worst_dw < 2e-6);
}

TEST_CASE("bf16 weight gradient rows and accumulated input gradients",
          "[unit]") {
  const int64_t m = 17, kk = 32, n = 40, first = 8, count = 16;
  const auto x = random_values(m * kk, 7), w = random_values(n * kk, 8),
             dy = random_values(m * n, 9);
  // Rows [first, first + count) of dw = dy^T x, as the whole product's
  // (within rounding: a smaller product may block its sums differently).
  std::vector<float> whole(n * kk, 0.0f), rows(n * kk, 0.0f);
  std::vector<float> unused(m * kk);
  k::linear_backward(bf16_stream(), x.data(), w.data(), dy.data(),
                     unused.data(), whole.data(), m, kk, n);
  k::linear_weight_grad_rows(bf16_stream(), x.data(), dy.data(), rows.data(), m,
                             kk, n, first, count);
  double largest = 0, worst_rows = 0;
  for (float v : whole)
    largest = std::max(largest, double(std::fabs(v)));
  for (int64_t j = first; j < first + count; ++j)
    for (int64_t p = 0; p < kk; ++p)
      worst_rows = std::max(
        worst_rows, std::fabs(rows[j * kk + p] - whole[j * kk + p]) / largest);
  CHECK(worst_rows < 1e-5);
  // dx += dy w adds the product to what is there.
  const auto dx0 = random_values(m * kk, 10);
  std::vector<float> product(m * kk), summed = dx0;
  k::linear_input_grad(bf16_stream(), w.data(), dy.data(), product.data(), m,
                       kk, n, false);
  k::linear_input_grad(bf16_stream(), w.data(), dy.data(), summed.data(), m, kk,
                       n, true);
  double worst = 0;
  for (int64_t i = 0; i < m * kk; ++i)
    worst = std::max(
      worst, double(std::fabs(summed[i] - (dx0[i] + product[i]))
                    / (std::fabs(dx0[i]) + std::fabs(product[i]) + 1e-30)));
  CHECK(worst < 1e-6);
}

TEST_CASE("bf16 GEMMs repeat to the bit, from any thread", "[unit]") {
  const int64_t m = 64, kk = 128, n = 80;
  const auto x = random_values(m * kk, 11), w = random_values(n * kk, 12);
  std::vector<float> first(m * n), again(m * n), other(m * n);
  k::linear_forward(bf16_stream(), x.data(), w.data(), first.data(), m, kk, n);
  k::linear_forward(bf16_stream(), x.data(), w.data(), again.data(), m, kk, n);
  std::thread t([&] {
    k::linear_forward(bf16_stream(), x.data(), w.data(), other.data(), m, kk,
                      n);
  });
  t.join();
  CHECK(first == again);
  CHECK(first == other);
}

TEST_CASE("grouped bf16 linear: experts with no rows and with some", "[unit]") {
  const int64_t kk = 24, n = 16;
  const std::vector<int64_t> rows = {3, 0, 5, 1};
  const int64_t m = 9, groups = 4;
  const auto x = random_values(m * kk, 13),
             w = random_values(groups * n * kk, 14);
  std::vector<float> y(m * n), each(m * n);
  k::grouped_linear_forward(bf16_stream(), x.data(), w.data(), rows.data(),
                            groups, y.data(), kk, n);
  int64_t at = 0;
  for (int64_t g = 0; g < groups; ++g) {
    k::linear_forward(bf16_stream(), x.data() + at * kk, w.data() + g * n * kk,
                      each.data() + at * n, rows[g], kk, n);
    at += rows[g];
  }
  CHECK(y == each);
}
