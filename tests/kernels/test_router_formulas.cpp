// The router's formulas against values worked out by hand: the auxiliary
// losses, capacity, dropping, bias balancing, top-k selection and the
// dispatch plan.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tutti/kernels/ops.hpp"

namespace k = tutti::kernels;
using Catch::Detail::Approx;

namespace {
const k::stream S = k::cpu_stream();

std::vector<double> softmax(std::vector<double> x, double temp = 1.0) {
  double mx = x[0], sum = 0.0;
  for (double v : x)
    mx = std::max(mx, v / temp);
  for (double& v : x)
    sum += (v = std::exp(v / temp - mx));
  for (double& v : x)
    v /= sum;
  return x;
}
} // namespace

TEST_CASE("switch loss is alpha * E * sum f_i P_i", "[router]") {
  // Two tokens, three experts; f from the global counts, P the mean prob.
  const std::vector<double> probs = {0.5, 0.3, 0.2, //
                                     0.1, 0.6, 0.3};
  const std::vector<double> f = {0.5, 0.25, 0.25};
  const double alpha = 0.01;
  // P = (0.3, 0.45, 0.25); sum f_i P_i = 0.15 + 0.1125 + 0.0625 = 0.325.
  const double expected = alpha * 3 * 0.325;
  CHECK(k::switch_loss_forward(S, probs.data(), f.data(), 2, 3, alpha, 2)
        == Approx(expected).epsilon(1e-14));
  // One token per shard: the shards' shares add up to the loss.
  const double a = k::switch_loss_forward(S, probs.data(), f.data(), 1, 3,
                                          alpha, 2);
  const double b = k::switch_loss_forward(S, probs.data() + 3, f.data(), 1, 3,
                                          alpha, 2);
  CHECK(a + b == Approx(expected).epsilon(1e-14));
  // Perfect balance (f_i = P_i = 1/E) gives exactly alpha.
  const std::vector<float> up(6, 1.0f / 3), uf(3, 1.0f / 3);
  CHECK(k::switch_loss_forward(S, up.data(), uf.data(), 2, 3, alpha, 2)
        == Approx(alpha).epsilon(1e-6));
}

TEST_CASE("z-loss is c * mean(logsumexp^2)", "[router]") {
  const std::vector<double> logits = {1.0, 2.0, 3.0, //
                                      0.0, 0.0, 0.0};
  const double c = 1e-3;
  const double l1 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double l2 = std::log(3.0);
  const double expected = c * (l1 * l1 + l2 * l2) / 2.0;
  CHECK(k::z_loss_forward(S, logits.data(), 2, 3, c, 2)
        == Approx(expected).epsilon(1e-14));
  // Large logits: the max-subtraction keeps it finite.
  const std::vector<float> big = {1000.f, 1000.f};
  CHECK(k::z_loss_forward(S, big.data(), 1, 2, 1.0, 1)
        == Approx(std::pow(1000.0 + std::log(2.0), 2)).epsilon(1e-12));
}

TEST_CASE("expert capacity = ceil(cf * T * k / E)", "[router]") {
  CHECK(k::expert_capacity(1.0, 8, 2, 4) == 4);
  CHECK(k::expert_capacity(1.25, 10, 2, 4) == 7); // ceil(6.25)
  CHECK(k::expert_capacity(2.0, 3, 1, 4) == 2);   // ceil(1.5)
  CHECK(k::expert_capacity(1.1, 10, 1, 1)
        == 11); // 1.1 * 10 is 11.000000000000002
  CHECK(k::expert_capacity(1.5, 0, 2, 8) == 0);
  CHECK(k::expert_capacity(0.0, 8, 2, 4)
        == std::numeric_limits<int64_t>::max());
  CHECK(k::expert_capacity(-1.0, 8, 2, 4)
        == std::numeric_limits<int64_t>::max());
}

TEST_CASE("apply_capacity keeps the highest gates", "[router]") {
  // 4 tokens, 2 experts, k = 2, capacity 2 per expert.
  // expert 0: t0 .6, t1 .7, t2 .45, t3 .6  -> keep t1, t0 (tie: lower token)
  // expert 1: t0 .4, t1 .3, t2 .55, t3 .4  -> keep t2, t0 (tie: lower token)
  const std::vector<int32_t> idx0 = {0, 1, 0, 1, 1, 0, 0, 1};
  const std::vector<double> gate = {0.6, 0.4, 0.7, 0.3, 0.55, 0.45, 0.6, 0.4};
  std::vector<int32_t> idx = idx0;
  std::vector<int64_t> counts(2, -7);
  CHECK(k::apply_capacity(S, idx.data(), gate.data(), counts.data(), 4, 2, 2, 2)
        == 4);
  CHECK(idx == std::vector<int32_t>{0, 1, 0, -1, 1, -1, -1, -1});
  CHECK(counts == std::vector<int64_t>{2, 2});

  // Capacity 3: only the lowest gate of each expert goes.
  idx = idx0;
  CHECK(k::apply_capacity(S, idx.data(), gate.data(), counts.data(), 4, 2, 2, 3)
        == 2);
  CHECK(idx == std::vector<int32_t>{0, 1, 0, -1, 1, -1, 0, 1});
  CHECK(counts == std::vector<int64_t>{3, 3});

  // Capacity >= n * k (and dropless) drop nothing.
  for (int64_t cap : {int64_t(8), std::numeric_limits<int64_t>::max()}) {
    idx = idx0;
    CHECK(
      k::apply_capacity(S, idx.data(), gate.data(), counts.data(), 4, 2, 2, cap)
      == 0);
    CHECK(idx == idx0);
    CHECK(counts == std::vector<int64_t>{4, 4});
  }

  // Already-dropped slots stay dropped and are not counted.
  idx = {0, -1, 0, 1, 1, -1, 0, 1};
  CHECK(k::apply_capacity(S, idx.data(), gate.data(), counts.data(), 4, 2, 2, 8)
        == 0);
  CHECK(counts == std::vector<int64_t>{3, 3});
}

TEST_CASE("bias_update moves by exactly rate towards balance", "[router]") {
  // mean = 6: expert 0 over-loaded, 1 under-loaded, 2 and 3 balanced.
  const std::vector<int64_t> counts = {10, 2, 6, 6};
  std::vector<double> bias = {0.5, -0.25, 0.125, 0.0};
  k::bias_update(S, bias.data(), counts.data(), 4, 0.125);
  CHECK(bias == std::vector<double>{0.375, -0.125, 0.125, 0.0});
  std::vector<float> fb = {0.0f, 0.0f, 0.0f, 0.0f};
  k::bias_update(S, fb.data(), counts.data(), 4, 1e-3);
  CHECK(fb == std::vector<float>{-1e-3f, 1e-3f, 0.0f, 0.0f});
}

TEST_CASE("top-k: bias changes selection, not gates", "[router]") {
  const std::vector<double> logits = {2.0, 1.0, 0.5, 0.0};
  std::vector<int32_t> idx(2);
  std::vector<double> gate(2), probs(4), probs_b(4);
  k::router_topk_forward(S, logits.data(), (const double*)nullptr, idx.data(),
                         gate.data(), probs.data(), 1, 4, 2, 1.0);
  CHECK(idx == std::vector<int32_t>{0, 1});
  auto g = softmax({2.0, 1.0});
  CHECK(gate[0] == Approx(g[0]).epsilon(1e-14));
  CHECK(gate[1] == Approx(g[1]).epsilon(1e-14));

  // Bias lifts expert 2 to the top: selection changes, and the gates are
  // the softmax over the RAW chosen logits (0.5, 2.0), best-biased first.
  const std::vector<double> bias = {0.0, 0.0, 3.0, 0.0};
  k::router_topk_forward(S, logits.data(), bias.data(), idx.data(), gate.data(),
                         probs_b.data(), 1, 4, 2, 1.0);
  CHECK(idx == std::vector<int32_t>{2, 0});
  g = softmax({0.5, 2.0});
  CHECK(gate[0] == Approx(g[0]).epsilon(1e-14));
  CHECK(gate[1] == Approx(g[1]).epsilon(1e-14));
  CHECK(probs_b == probs); // P_i ignores the bias too
  auto p = softmax(logits);
  for (int i = 0; i < 4; ++i)
    CHECK(probs[i] == Approx(p[i]).epsilon(1e-14));
}

TEST_CASE("top-k: temperature", "[router]") {
  const std::vector<double> logits = {1.0, 0.0, -1.0};
  std::vector<int32_t> idx(2);
  std::vector<double> gate(2), probs(3);
  for (double temp : {0.5, 1.0, 2.0, 100.0}) {
    k::router_topk_forward(S, logits.data(), (const double*)nullptr, idx.data(),
                           gate.data(), probs.data(), 1, 3, 2, temp);
    CHECK(idx == std::vector<int32_t>{0, 1}); // selection ignores temperature
    CHECK(gate[0]
          == Approx(1.0 / (1.0 + std::exp(-1.0 / temp))).epsilon(1e-14));
    auto p = softmax(logits, temp);
    for (int i = 0; i < 3; ++i)
      CHECK(probs[i] == Approx(p[i]).epsilon(1e-14));
  }
  // Hot: near uniform; cold: near one-hot.
  k::router_topk_forward(S, logits.data(), (const double*)nullptr, idx.data(),
                         gate.data(), probs.data(), 1, 3, 2, 1e3);
  CHECK(gate[0] == Approx(0.5).epsilon(1e-3));
  k::router_topk_forward(S, logits.data(), (const double*)nullptr, idx.data(),
                         gate.data(), probs.data(), 1, 3, 2, 1e-3);
  CHECK(gate[0] == Approx(1.0).epsilon(1e-12));
}

TEST_CASE("top-k: ties go to the lower index", "[router]") {
  std::vector<int32_t> idx(3);
  std::vector<double> gate(3), probs(4);
  const std::vector<double> a = {1.0, 3.0, 3.0, 1.0};
  k::router_topk_forward(S, a.data(), (const double*)nullptr, idx.data(),
                         gate.data(), probs.data(), 1, 4, 3, 1.0);
  CHECK(idx == std::vector<int32_t>{1, 2, 0});
  const std::vector<double> flat = {0.0, 0.0, 0.0, 0.0};
  k::router_topk_forward(S, flat.data(), (const double*)nullptr, idx.data(),
                         gate.data(), probs.data(), 1, 4, 3, 1.0);
  CHECK(idx == std::vector<int32_t>{0, 1, 2});
  // A tie created by the bias: scores (2, 2, 0).
  const std::vector<double> l = {1.0, 2.0, 0.0}, bias = {1.0, 0.0, 0.0};
  k::router_topk_forward(S, l.data(), bias.data(), idx.data(), gate.data(),
                         probs.data(), 1, 3, 1, 1.0);
  CHECK(idx[0] == 0);
  CHECK(gate[0] == 1.0);
}

TEST_CASE("permute_plan: counts and stable order by expert", "[router]") {
  // tokens: t0 -> (2, 0), t1 -> (1, 2), t2 -> (0, dropped)
  const std::vector<int32_t> idx = {2, 0, 1, 2, 0, -1};
  std::vector<int32_t> slot(6, -9);
  std::vector<int64_t> counts(3, -9);
  CHECK(k::permute_plan(S, idx.data(), 3, 3, 2, slot.data(), counts.data())
        == 5);
  CHECK(counts == std::vector<int64_t>{2, 1, 2});
  // expert 0: slots 1, 4; expert 1: slot 2; expert 2: slots 0, 3.
  CHECK(std::vector<int32_t>(slot.begin(), slot.begin() + 5)
        == std::vector<int32_t>{1, 4, 2, 0, 3});

  // The plan after apply_capacity agrees with its kept counts.
  std::vector<int32_t> idx2 = {0, 1, 0, 1, 1, 0, 0, 1};
  const std::vector<double> gate = {0.6, 0.4, 0.7, 0.3, 0.55, 0.45, 0.6, 0.4};
  std::vector<int64_t> kept(2), planned(2);
  k::apply_capacity(S, idx2.data(), gate.data(), kept.data(), 4, 2, 2, 2);
  std::vector<int32_t> slot2(8);
  CHECK(k::permute_plan(S, idx2.data(), 4, 2, 2, slot2.data(), planned.data())
        == 4);
  CHECK(planned == kept);
}
