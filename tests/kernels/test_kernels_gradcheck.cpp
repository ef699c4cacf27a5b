// Every kernel backward against central finite differences, in double.
//
// For an op y = f(x) we draw a random upstream gradient G and check the
// analytic dL/dx of L = <G, f(x)> against (L(x + h e_i) - L(x - h e_i)) / 2h
// for every element of every input, on tiny sizes.

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
using tutti::testing::numeric_grad;
using tutti::testing::rel_err;

namespace {

const k::stream S = k::cpu_stream();

Vec minus(const Vec& a, const Vec& b) {
  Vec r(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    r[i] = a[i] - b[i];
  return r;
}

} // namespace

TEST_CASE("gradcheck linear", "[kernels][gradcheck]") {
  std::mt19937_64 rng(1);
  const int64_t m = 3, kk = 4, n = 5;
  Vec x = randn(m * kk, rng), w = randn(n * kk, rng), G = randn(m * n, rng);
  auto loss = [&] {
    Vec y(m * n);
    k::linear_forward(S, x.data(), w.data(), y.data(), m, kk, n);
    return dot(G, y);
  };
  Vec dx(m * kk), dw0 = randn(n * kk, rng), dw = dw0; // dw must accumulate
  k::linear_backward(S, x.data(), w.data(), G.data(), dx.data(), dw.data(), m,
                     kk, n);
  check_grad("dx", dx, x, loss);
  check_grad("dw", minus(dw, dw0), w, loss);
  // dx == nullptr: only the weight gradient.
  Vec dw2(n * kk, 0.0);
  k::linear_backward(S, x.data(), w.data(), G.data(), (double*)nullptr,
                     dw2.data(), m, kk, n);
  CHECK(rel_err(dw2, minus(dw, dw0)) <= 1e-14); // up to dw0 + g - dw0 rounding
}

TEST_CASE("gradcheck linear's parts: input gradient, weight gradient rows",
          "[kernels][gradcheck]") {
  std::mt19937_64 rng(11);
  const int64_t m = 3, kk = 4, n = 5;
  Vec x = randn(m * kk, rng), w = randn(n * kk, rng), G = randn(m * n, rng);
  auto loss = [&] {
    Vec y(m * n);
    k::linear_forward(S, x.data(), w.data(), y.data(), m, kk, n);
    return dot(G, y);
  };
  Vec dx(m * kk, 7.0); // overwritten
  k::linear_input_grad(S, w.data(), G.data(), dx.data(), m, kk, n, false);
  check_grad("dx", dx, x, loss);
  // accumulate: added to what dx holds.
  const Vec before = randn(m * kk, rng);
  Vec dx_added = before;
  k::linear_input_grad(S, w.data(), G.data(), dx_added.data(), m, kk, n, true);
  CHECK(rel_err(minus(dx_added, before), dx) <= 1e-14);
  // The weight gradient's rows in two tiles, 0..2 and 2..5: accumulated.
  const Vec dw0 = randn(n * kk, rng);
  Vec dw = dw0;
  k::linear_weight_grad_rows(S, x.data(), G.data(), dw.data(), m, kk, n, 0, 2);
  k::linear_weight_grad_rows(S, x.data(), G.data(), dw.data(), m, kk, n, 2, 3);
  check_grad("dw", minus(dw, dw0), w, loss);
}

TEST_CASE("gradcheck grouped_linear", "[kernels][gradcheck]") {
  std::mt19937_64 rng(2);
  const int64_t kk = 3, n = 4, groups = 3;
  const int64_t rows[groups] = {2, 0, 3}; // an empty expert in the middle
  const int64_t m = 5;
  Vec x = randn(m * kk, rng), w = randn(groups * n * kk, rng),
      G = randn(m * n, rng);
  auto loss = [&] {
    Vec y(m * n);
    k::grouped_linear_forward(S, x.data(), w.data(), rows, groups, y.data(), kk,
                              n);
    return dot(G, y);
  };
  Vec dx(m * kk), dw0 = randn(groups * n * kk, rng), dw = dw0;
  k::grouped_linear_backward(S, x.data(), w.data(), G.data(), rows, groups,
                             dx.data(), dw.data(), kk, n);
  check_grad("dx", dx, x, loss);
  check_grad("dw", minus(dw, dw0), w, loss);
}

TEST_CASE("gradcheck embedding", "[kernels][gradcheck]") {
  std::mt19937_64 rng(3);
  const int64_t vocab = 6, dim = 3, n = 5;
  const int32_t ids[n] = {4, 1, 4, 0, 5}; // a repeated id must add up
  Vec table = randn(vocab * dim, rng), G = randn(n * dim, rng);
  auto loss = [&] {
    Vec out(n * dim);
    k::embedding_forward(S, ids, table.data(), out.data(), n, dim);
    return dot(G, out);
  };
  Vec dt0 = randn(vocab * dim, rng), dt = dt0;
  k::embedding_backward(S, ids, G.data(), dt.data(), n, dim);
  check_grad("dtable", minus(dt, dt0), table, loss);
}

TEST_CASE("gradcheck rmsnorm", "[kernels][gradcheck]") {
  std::mt19937_64 rng(4);
  const int64_t n = 3, dim = 5;
  const double eps = 1e-5;
  Vec x = randn(n * dim, rng), w = randn(dim, rng), G = randn(n * dim, rng);
  auto loss = [&] {
    Vec y(n * dim), r(n);
    k::rmsnorm_forward(S, x.data(), w.data(), y.data(), r.data(), n, dim, eps);
    return dot(G, y);
  };
  Vec y(n * dim), rstd(n), dx(n * dim), dw0 = randn(dim, rng), dw = dw0;
  k::rmsnorm_forward(S, x.data(), w.data(), y.data(), rstd.data(), n, dim, eps);
  k::rmsnorm_backward(S, x.data(), w.data(), rstd.data(), G.data(), dx.data(),
                      dw.data(), n, dim);
  check_grad("dx", dx, x, loss);
  check_grad("dw", minus(dw, dw0), w, loss);
}

TEST_CASE("gradcheck rope", "[kernels][gradcheck]") {
  std::mt19937_64 rng(5);
  const int64_t b = 2, s = 3, h = 2, d = 6;
  const double theta = 10000.0;
  Vec x = randn(b * s * h * d, rng), G = randn(x.size(), rng);
  auto loss = [&] {
    Vec y = x;
    k::rope_forward(S, y.data(), b, s, h, d, theta);
    return dot(G, y);
  };
  Vec dx = G;
  k::rope_backward(S, dx.data(), b, s, h, d, theta);
  check_grad("dx", dx, x, loss);
}

TEST_CASE("gradcheck attention (GQA)", "[kernels][gradcheck]") {
  std::mt19937_64 rng(6);
  const int64_t b = 2, s = 4, hq = 4, hkv = 2, d = 3;
  Vec q = randn(b * s * hq * d, rng), kv = randn(b * s * hkv * d, rng),
      v = randn(b * s * hkv * d, rng), G = randn(b * s * hq * d, rng);
  Vec probs(b * hq * s * s), out(q.size());
  auto loss = [&] {
    Vec o(q.size()), p(probs.size());
    k::attention_forward(S, q.data(), kv.data(), v.data(), o.data(), p.data(),
                         b, s, hq, hkv, d);
    return dot(G, o);
  };
  k::attention_forward(S, q.data(), kv.data(), v.data(), out.data(),
                       probs.data(), b, s, hq, hkv, d);
  // Garbage in the outputs: they must be overwritten, not accumulated.
  Vec dq(q.size(), 7.0), dk(kv.size(), 7.0), dv(v.size(), 7.0);
  k::attention_backward(S, q.data(), kv.data(), v.data(), probs.data(),
                        G.data(), dq.data(), dk.data(), dv.data(), b, s, hq,
                        hkv, d);
  check_grad("dq", dq, q, loss);
  check_grad("dk", dk, kv, loss);
  check_grad("dv", dv, v, loss);
}

TEST_CASE("gradcheck swiglu", "[kernels][gradcheck]") {
  std::mt19937_64 rng(7);
  const int64_t n = 9;
  Vec g = randn(n, rng, 2.0), u = randn(n, rng), G = randn(n, rng);
  auto loss = [&] {
    Vec h(n);
    k::swiglu_forward(S, g.data(), u.data(), h.data(), n);
    return dot(G, h);
  };
  Vec dg(n), du(n);
  k::swiglu_backward(S, g.data(), u.data(), G.data(), dg.data(), du.data(), n);
  check_grad("dgate", dg, g, loss);
  check_grad("dup", du, u, loss);
}

TEST_CASE("gradcheck router_topk through the gates", "[kernels][gradcheck]") {
  std::mt19937_64 rng(8);
  const int64_t n = 5, e = 6, kk = 2;
  const double temp = 0.7;
  Vec logits = randn(n * e, rng), bias = randn(e, rng, 0.5),
      G = randn(n * kk, rng);
  std::vector<int32_t> idx(n * kk);
  Vec gate(n * kk), probs(n * e);
  auto loss = [&] {
    std::vector<int32_t> i2(n * kk);
    Vec g2(n * kk), p2(n * e);
    k::router_topk_forward(S, logits.data(), bias.data(), i2.data(), g2.data(),
                           p2.data(), n, e, kk, temp);
    REQUIRE(i2 == idx); // the perturbation must not change the selection
    return dot(G, g2);
  };
  k::router_topk_forward(S, logits.data(), bias.data(), idx.data(), gate.data(),
                         probs.data(), n, e, kk, temp);
  Vec dl(n * e, 7.0);
  k::router_topk_backward(S, idx.data(), gate.data(), G.data(), dl.data(), n, e,
                          kk, temp);
  check_grad("dlogits", dl, logits, loss);
}

TEST_CASE("gradcheck switch loss", "[kernels][gradcheck]") {
  std::mt19937_64 rng(9);
  const int64_t n = 4, e = 5, kk = 2, global = 3 * n;
  const double temp = 1.3, coeff = 0.7;
  Vec logits = randn(n * e, rng), frac(e);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto& f : frac)
    f = u(rng);
  auto probs_of = [&] {
    std::vector<int32_t> idx(n * kk);
    Vec gate(n * kk), p(n * e);
    k::router_topk_forward(S, logits.data(), (const double*)nullptr, idx.data(),
                           gate.data(), p.data(), n, e, kk, temp);
    return p;
  };
  auto loss = [&] {
    Vec p = probs_of();
    return k::switch_loss_forward(S, p.data(), frac.data(), n, e, coeff,
                                  global);
  };
  Vec p = probs_of(), d0 = randn(n * e, rng), d = d0; // dlogits accumulate
  k::switch_loss_backward(S, p.data(), frac.data(), d.data(), n, e, coeff,
                          global, temp);
  check_grad("dlogits", minus(d, d0), logits, loss);
}

TEST_CASE("gradcheck z loss", "[kernels][gradcheck]") {
  std::mt19937_64 rng(10);
  const int64_t n = 4, e = 5, global = 2 * n;
  const double coeff = 0.3;
  Vec logits = randn(n * e, rng, 3.0);
  auto loss = [&] {
    return k::z_loss_forward(S, logits.data(), n, e, coeff, global);
  };
  Vec d0 = randn(n * e, rng), d = d0;
  k::z_loss_backward(S, logits.data(), d.data(), n, e, coeff, global);
  check_grad("dlogits", minus(d, d0), logits, loss);
}

TEST_CASE("gradcheck permute_rows", "[kernels][gradcheck]") {
  std::mt19937_64 rng(11);
  const int64_t n = 4, e = 3, kk = 2, dim = 3;
  const std::vector<int32_t> idx = {2, 0, 1, -1, 0, 2, 1, 0}; // one dropped
  std::vector<int32_t> slot(n * kk);
  std::vector<int64_t> counts(e);
  const int64_t rows = k::permute_plan(S, idx.data(), n, e, kk, slot.data(),
                                       counts.data());
  REQUIRE(rows == 7);
  Vec x = randn(n * dim, rng), G = randn(rows * dim, rng);
  auto loss = [&] {
    Vec out(rows * dim);
    k::permute_rows(S, x.data(), slot.data(), out.data(), rows, kk, dim);
    return dot(G, out);
  };
  Vec dx0 = randn(n * dim, rng), dx = dx0; // dx is not cleared
  k::permute_rows_backward(S, G.data(), slot.data(), dx.data(), rows, kk, dim);
  check_grad("dx", minus(dx, dx0), x, loss);
}

TEST_CASE("gradcheck unpermute_combine", "[kernels][gradcheck]") {
  std::mt19937_64 rng(12);
  const int64_t n = 4, e = 3, kk = 2, dim = 3;
  const std::vector<int32_t> idx = {2, 0, 1, -1, 0, 2, 1, 0};
  std::vector<int32_t> slot(n * kk);
  std::vector<int64_t> counts(e);
  const int64_t rows = k::permute_plan(S, idx.data(), n, e, kk, slot.data(),
                                       counts.data());
  Vec y = randn(rows * dim, rng), gate = randn(n * kk, rng),
      G = randn(n * dim, rng);
  auto loss = [&] {
    Vec out(n * dim, 5.0);
    k::unpermute_combine(S, y.data(), slot.data(), gate.data(), out.data(),
                         rows, n, kk, dim);
    return dot(G, out);
  };
  Vec dy(rows * dim, 7.0), dgate(n * kk, 7.0);
  k::unpermute_combine_backward(S, G.data(), y.data(), slot.data(), gate.data(),
                                dy.data(), dgate.data(), rows, n, kk, dim);
  CHECK(dgate[3] == 0.0); // the dropped slot
  check_grad("dy", dy, y, loss);
  check_grad("dgate", dgate, gate, loss);
}

TEST_CASE("gradcheck cross entropy", "[kernels][gradcheck]") {
  std::mt19937_64 rng(13);
  const int64_t n = 5, vocab = 7;
  const double scale = 0.25;
  const int32_t targets[n] = {3, 0, -100, 6, 3}; // -100: ignored row
  Vec logits = randn(n * vocab, rng, 2.0);
  auto loss = [&] {
    Vec lse(n);
    return scale
           * k::cross_entropy_forward(S, logits.data(), targets, lse.data(), n,
                                      vocab);
  };
  Vec lse(n), d(n * vocab, 7.0);
  k::cross_entropy_forward(S, logits.data(), targets, lse.data(), n, vocab);
  k::cross_entropy_backward(S, logits.data(), targets, lse.data(), d.data(), n,
                            vocab, scale);
  check_grad("dlogits", d, logits, loss);
}
