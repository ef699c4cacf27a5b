// DeepSeek-V3's feed-forward side against central finite differences, in
// double, through the kernel calls training makes
// (train/src/model/mlp_block.cpp): a SwiGLU MLP on every token, its input
// gradient added to what the routed experts left (the shared experts), and
// a leading dense layer: RMSNorm, the MLP, the residual.

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "tutti/kernels/ops.hpp"

#include "gradcheck_support.hpp"
#include "kernel_inputs.hpp"

namespace k = tutti::kernels;
using Vec = std::vector<double>;
using tutti::testing::check_grad;
using tutti::testing::dot;
using tutti::testing::randn;

namespace {

const k::stream S = k::cpu_stream();

struct mlp {
  Vec w1, w3, w2;
};

struct mlp_acts {
  Vec gate, up, h, out;
};

// As rank_model::mlp_forward.
mlp_acts mlp_forward(const mlp& w, const Vec& x, int64_t n, int64_t d,
                     int64_t f) {
  mlp_acts a{Vec(n * f), Vec(n * f), Vec(n * f), Vec(n * d)};
  k::linear_forward(S, x.data(), w.w1.data(), a.gate.data(), n, d, f);
  k::linear_forward(S, x.data(), w.w3.data(), a.up.data(), n, d, f);
  k::swiglu_forward(S, a.gate.data(), a.up.data(), a.h.data(), n * f);
  k::linear_forward(S, a.h.data(), w.w2.data(), a.out.data(), n, f, d);
  return a;
}

// As rank_model::mlp_backward: the input gradient added to dx.
void mlp_backward(const mlp& w, mlp& dw, const Vec& x, const mlp_acts& a,
                  const Vec& dy, Vec& dx, int64_t n, int64_t d, int64_t f) {
  Vec dh(n * f), dgate(n * f), dup(n * f);
  k::linear_backward(S, a.h.data(), w.w2.data(), dy.data(), dh.data(),
                     dw.w2.data(), n, f, d);
  k::swiglu_backward(S, a.gate.data(), a.up.data(), dh.data(), dgate.data(),
                     dup.data(), n * f);
  const std::pair<const Vec*, std::pair<const Vec*, Vec*>> in[] = {
    {&dgate, {&w.w1, &dw.w1}}, {&dup, {&w.w3, &dw.w3}}};
  for (const auto& [dproj, weights] : in) {
    k::linear_input_grad(S, weights.first->data(), dproj->data(), dx.data(), n,
                         d, f, true);
    k::linear_weight_grad_rows(S, x.data(), dproj->data(),
                               weights.second->data(), n, d, f, 0, f);
  }
}

mlp random_mlp(std::mt19937_64& rng, int64_t d, int64_t f) {
  return {randn(f * d, rng), randn(f * d, rng), randn(d * f, rng)};
}

mlp zeros_like(const mlp& w) {
  return {Vec(w.w1.size(), 0.0), Vec(w.w3.size(), 0.0), Vec(w.w2.size(), 0.0)};
}

} // namespace

TEST_CASE("gradcheck shared experts: a SwiGLU MLP beside the routed ones",
          "[kernels][gradcheck]") {
  std::mt19937_64 rng(31);
  const int64_t n = 5, d = 6, f = 8;
  Vec x = randn(n * d, rng), routed = randn(d * d, rng), G = randn(n * d, rng);
  mlp w = random_mlp(rng, d, f);
  // The routed experts stand in as one linear map of the same input.
  auto forward = [&] {
    auto a = mlp_forward(w, x, n, d, f);
    Vec r(n * d);
    k::linear_forward(S, x.data(), routed.data(), r.data(), n, d, d);
    for (int64_t i = 0; i < n * d; ++i)
      a.out[i] += r[i];
    return a;
  };
  auto loss = [&] { return dot(G, forward().out); };

  const auto a = forward();
  Vec dx(n * d), drouted(routed.size(), 0.0);
  k::linear_backward(S, x.data(), routed.data(), G.data(), dx.data(),
                     drouted.data(), n, d, d);
  mlp dw = zeros_like(w);
  mlp_backward(w, dw, x, a, G, dx, n, d, f);

  check_grad("shared w1", dw.w1, w.w1, loss);
  check_grad("shared w3", dw.w3, w.w3, loss);
  check_grad("shared w2", dw.w2, w.w2, loss);
  check_grad("routed", drouted, routed, loss);
  check_grad("input", dx, x, loss);
}

TEST_CASE("gradcheck a leading dense layer: RMSNorm, SwiGLU MLP, residual",
          "[kernels][gradcheck]") {
  std::mt19937_64 rng(32);
  const int64_t n = 4, d = 6, f = 10;
  const double eps = 1e-6;
  Vec x = randn(n * d, rng), norm = randn(d, rng), G = randn(n * d, rng);
  mlp w = random_mlp(rng, d, f);
  struct acts {
    Vec xn, rstd;
    mlp_acts m;
  };
  auto forward = [&] {
    acts a{Vec(n * d), Vec(n), {}};
    k::rmsnorm_forward(S, x.data(), norm.data(), a.xn.data(), a.rstd.data(), n,
                       d, eps);
    a.m = mlp_forward(w, a.xn, n, d, f);
    for (int64_t i = 0; i < n * d; ++i)
      a.m.out[i] += x[i];
    return a;
  };
  auto loss = [&] { return dot(G, forward().m.out); };

  const auto a = forward();
  Vec dxn(n * d, 0.0), dx(n * d), dnorm(d, 0.0);
  mlp dw = zeros_like(w);
  mlp_backward(w, dw, a.xn, a.m, G, dxn, n, d, f);
  k::rmsnorm_backward(S, x.data(), norm.data(), a.rstd.data(), dxn.data(),
                      dx.data(), dnorm.data(), n, d);
  for (int64_t i = 0; i < n * d; ++i)
    dx[i] += G[i];

  check_grad("dense gate_proj", dw.w1, w.w1, loss);
  check_grad("dense up_proj", dw.w3, w.w3, loss);
  check_grad("dense down_proj", dw.w2, w.w2, loss);
  check_grad("post_attention_layernorm", dnorm, norm, loss);
  check_grad("input", dx, x, loss);
}
