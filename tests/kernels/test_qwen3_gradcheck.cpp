// Qwen3-MoE's pieces against central finite differences, in double, through
// the kernel calls training makes (train/src/model/attention_block.cpp,
// moe_block.cpp): the per-head RMSNorm of queries and keys (QK-norm) before
// the rotary embedding and the attention, and gates without
// renormalisation (norm_topk_prob false). Mixtral's gates, the softmax over
// the chosen logits, equal the renormalised softmax over all experts.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tutti/kernels/ops.hpp"

#include "gradcheck_support.hpp"
#include "kernel_inputs.hpp"

namespace k = tutti::kernels;
using Vec = std::vector<double>;
using tutti::testing::randn;
using tutti::testing::check_grad;
using tutti::testing::dot;

namespace {

const k::stream S = k::cpu_stream();

} // namespace

TEST_CASE("gradcheck QK-norm attention: q, k RMSNormed per head, then rope",
          "[kernels][gradcheck]") {
  std::mt19937_64 rng(21);
  // Two sequences of 3, 4 query heads over 2 key/value heads of 4 values,
  // from a width of 6: heads * head_dim != width, as in Qwen3-MoE.
  const int64_t b = 2, s = 3, n = b * s, d = 6, hq = 4, hkv = 2, hd = 4;
  const double eps = 1e-6, theta = 10000.0;
  Vec x = randn(n * d, rng), wq = randn(hq * hd * d, rng),
      wk = randn(hkv * hd * d, rng), wv = randn(hkv * hd * d, rng),
      qn = randn(hd, rng), kn = randn(hd, rng), G = randn(n * hq * hd, rng);
  struct acts {
    Vec q_pre, k_pre, q, k, v, rq, rk, probs, out;
  };
  auto forward = [&] {
    acts a{Vec(n * hq * hd),  Vec(n * hkv * hd),   Vec(n * hq * hd),
           Vec(n * hkv * hd), Vec(n * hkv * hd),   Vec(n * hq),
           Vec(n * hkv),      Vec(b * hq * s * s), Vec(n * hq * hd)};
    k::linear_forward(S, x.data(), wq.data(), a.q_pre.data(), n, d, hq * hd);
    k::linear_forward(S, x.data(), wk.data(), a.k_pre.data(), n, d, hkv * hd);
    k::linear_forward(S, x.data(), wv.data(), a.v.data(), n, d, hkv * hd);
    k::rmsnorm_forward(S, a.q_pre.data(), qn.data(), a.q.data(), a.rq.data(),
                       n * hq, hd, eps);
    k::rmsnorm_forward(S, a.k_pre.data(), kn.data(), a.k.data(), a.rk.data(),
                       n * hkv, hd, eps);
    k::rope_forward(S, a.q.data(), b, s, hq, hd, theta);
    k::rope_forward(S, a.k.data(), b, s, hkv, hd, theta);
    k::attention_forward(S, a.q.data(), a.k.data(), a.v.data(), a.out.data(),
                         a.probs.data(), b, s, hq, hkv, hd);
    return a;
  };
  auto loss = [&] { return dot(G, forward().out); };

  auto a = forward();
  Vec dq(n * hq * hd), dk(n * hkv * hd), dv(n * hkv * hd);
  k::attention_backward(S, a.q.data(), a.k.data(), a.v.data(), a.probs.data(),
                        G.data(), dq.data(), dk.data(), dv.data(), b, s, hq,
                        hkv, hd);
  k::rope_backward(S, dq.data(), b, s, hq, hd, theta);
  k::rope_backward(S, dk.data(), b, s, hkv, hd, theta);
  Vec dq_pre(dq.size()), dk_pre(dk.size()), dqn(hd, 0.0), dkn(hd, 0.0);
  k::rmsnorm_backward(S, a.q_pre.data(), qn.data(), a.rq.data(), dq.data(),
                      dq_pre.data(), dqn.data(), n * hq, hd);
  k::rmsnorm_backward(S, a.k_pre.data(), kn.data(), a.rk.data(), dk.data(),
                      dk_pre.data(), dkn.data(), n * hkv, hd);
  Vec dx(n * d, 0.0), dwq(wq.size(), 0.0), dwk(wk.size(), 0.0),
    dwv(wv.size(), 0.0), part(n * d);
  k::linear_backward(S, x.data(), wq.data(), dq_pre.data(), dx.data(),
                     dwq.data(), n, d, hq * hd);
  k::linear_backward(S, x.data(), wk.data(), dk_pre.data(), part.data(),
                     dwk.data(), n, d, hkv * hd);
  for (int64_t i = 0; i < n * d; ++i)
    dx[i] += part[i];
  k::linear_backward(S, x.data(), wv.data(), dv.data(), part.data(), dwv.data(),
                     n, d, hkv * hd);
  for (int64_t i = 0; i < n * d; ++i)
    dx[i] += part[i];

  check_grad("q_norm", dqn, qn, loss);
  check_grad("k_norm", dkn, kn, loss);
  check_grad("q_proj", dwq, wq, loss);
  check_grad("k_proj", dwk, wk, loss);
  check_grad("v_proj", dwv, wv, loss);
  check_grad("input", dx, x, loss);
}

TEST_CASE("gradcheck gates without renormalisation (softmax over all experts)",
          "[kernels][gradcheck]") {
  std::mt19937_64 rng(22);
  const int64_t n = 5, e = 6, kk = 3;
  const double temp = 0.8;
  Vec logits = randn(n * e, rng), G = randn(n * kk, rng);
  std::vector<int32_t> idx(n * kk);
  Vec gate(n * kk), probs(n * e);
  auto route = [&](std::vector<int32_t>& i, Vec& g, Vec& p) {
    k::router_topk_forward(S, logits.data(), (const double*)nullptr, i.data(),
                           g.data(), p.data(), n, e, kk, temp);
    k::router_gates_from_probs(S, i.data(), p.data(), g.data(), n, e, kk);
  };
  auto loss = [&] {
    std::vector<int32_t> i2(n * kk);
    Vec g2(n * kk), p2(n * e);
    route(i2, g2, p2);
    REQUIRE(i2 == idx); // the perturbation must not change the selection
    return dot(G, g2);
  };
  route(idx, gate, probs);
  Vec dl(n * e, 7.0); // overwritten, not accumulated
  k::router_gates_from_probs_backward(S, idx.data(), probs.data(), G.data(),
                                      dl.data(), n, e, kk, temp);
  check_grad("dlogits", dl, logits, loss);
}

TEST_CASE("the softmax over the chosen logits is the renormalised softmax "
          "over all experts",
          "[kernels]") {
  std::mt19937_64 rng(23);
  const int64_t n = 7, e = 8, kk = 2;
  Vec logits = randn(n * e, rng, 2.0);
  std::vector<int32_t> idx(n * kk);
  Vec mixtral(n * kk), all(n * kk), probs(n * e);
  k::router_topk_forward(S, logits.data(), (const double*)nullptr, idx.data(),
                         mixtral.data(), probs.data(), n, e, kk, 1.0);
  k::router_gates_from_probs(S, idx.data(), probs.data(), all.data(), n, e, kk);
  for (int64_t t = 0; t < n; ++t) {
    double sum = 0.0;
    for (int64_t j = 0; j < kk; ++j)
      sum += all[t * kk + j];
    for (int64_t j = 0; j < kk; ++j)
      CHECK(std::abs(all[t * kk + j] / sum - mixtral[t * kk + j]) < 1e-15);
  }
}
