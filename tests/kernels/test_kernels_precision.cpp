// float32 against float64 for every op on the same inputs, and bitwise
// determinism: running an op twice gives identical bits.
//
// Inputs are drawn in double and rounded to float first, so both precisions
// see exactly the same values and only the arithmetic differs.

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tutti/kernels/ops.hpp"

#include "kernel_inputs.hpp"

namespace k = tutti::kernels;
using Vec = std::vector<double>;
using tutti::testing::as;
using tutti::testing::randn_in_float;
using tutti::testing::rel_err;
using tutti::testing::wide;

namespace {

const k::stream S = k::cpu_stream();

// run(T{}) returns the op's outputs (widened to double). Checks float vs
// double per output, and that two runs in each precision agree bitwise.
template <class Run>
void check_op(const char* name, Run run, double tol = 1e-5) {
  k::use_single_threaded_blas();
  const std::vector<Vec> f1 = run(float{}), f2 = run(float{});
  const std::vector<Vec> d1 = run(double{}), d2 = run(double{});
  REQUIRE(f1.size() == d1.size());
  for (size_t i = 0; i < f1.size(); ++i) {
    INFO(name << " output " << i);
    REQUIRE(f1[i].size() == d1[i].size());
    CHECK(rel_err(f1[i], d1[i]) <= tol);
    CHECK(std::memcmp(f1[i].data(), f2[i].data(), f1[i].size() * 8) == 0);
    CHECK(std::memcmp(d1[i].data(), d2[i].data(), d1[i].size() * 8) == 0);
  }
}

} // namespace

TEST_CASE("precision linear and grouped linear", "[kernels][precision]") {
  std::mt19937_64 rng(21);
  const int64_t m = 16, kk = 32, n = 24, G = 3;
  const int64_t rows[G] = {5, 0, 11};
  const Vec x = randn_in_float(m * kk, rng),
            w = randn_in_float(G * n * kk, rng),
            dy = randn_in_float(m * n, rng),
            dw0 = randn_in_float(G * n * kk, rng);
  check_op("linear", [&](auto tag) {
    using T = decltype(tag);
    auto xt = as<T>(x), wt = as<T>(w), dyt = as<T>(dy), dw = as<T>(dw0);
    std::vector<T> y(m * n), dx(m * kk);
    k::linear_forward(S, xt.data(), wt.data(), y.data(), m, kk, n);
    k::linear_backward(S, xt.data(), wt.data(), dyt.data(), dx.data(),
                       dw.data(), m, kk, n);
    return std::vector<Vec>{wide(y), wide(dx), wide(dw)};
  });
  check_op("grouped_linear", [&](auto tag) {
    using T = decltype(tag);
    auto xt = as<T>(x), wt = as<T>(w), dyt = as<T>(dy), dw = as<T>(dw0);
    std::vector<T> y(m * n), dx(m * kk);
    k::grouped_linear_forward(S, xt.data(), wt.data(), rows, G, y.data(), kk,
                              n);
    k::grouped_linear_backward(S, xt.data(), wt.data(), dyt.data(), rows, G,
                               dx.data(), dw.data(), kk, n);
    return std::vector<Vec>{wide(y), wide(dx), wide(dw)};
  });
}

TEST_CASE("precision embedding, rmsnorm, rope, swiglu",
          "[kernels][precision]") {
  std::mt19937_64 rng(22);
  const int64_t vocab = 11, dim = 32, n = 9;
  const std::vector<int32_t> ids = {3, 10, 0, 3, 7, 7, 1, 2, 3};
  const Vec table = randn_in_float(vocab * dim, rng),
            dout = randn_in_float(n * dim, rng), w = randn_in_float(dim, rng),
            x = randn_in_float(n * dim, rng, 3.0);
  check_op("embedding", [&](auto tag) {
    using T = decltype(tag);
    auto tt = as<T>(table), dt = as<T>(table), g = as<T>(dout);
    std::vector<T> out(n * dim);
    k::embedding_forward(S, ids.data(), tt.data(), out.data(), n, dim);
    k::embedding_backward(S, ids.data(), g.data(), dt.data(), n, dim);
    return std::vector<Vec>{wide(out), wide(dt)};
  });
  check_op("rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    auto xt = as<T>(x), wt = as<T>(w), g = as<T>(dout), dw = as<T>(w);
    std::vector<T> y(n * dim), r(n), dx(n * dim);
    k::rmsnorm_forward(S, xt.data(), wt.data(), y.data(), r.data(), n, dim,
                       T(1e-5));
    k::rmsnorm_backward(S, xt.data(), wt.data(), r.data(), g.data(), dx.data(),
                        dw.data(), n, dim);
    return std::vector<Vec>{wide(y), wide(r), wide(dx), wide(dw)};
  });
  check_op("rope", [&](auto tag) {
    using T = decltype(tag);
    // x as [batch 3, seq 3, heads 2, head_dim 16].
    auto y = as<T>(x), dx = as<T>(dout);
    k::rope_forward(S, y.data(), 3, 3, 2, 16, 10000.0);
    k::rope_backward(S, dx.data(), 3, 3, 2, 16, 10000.0);
    return std::vector<Vec>{wide(y), wide(dx)};
  });
  check_op("swiglu", [&](auto tag) {
    using T = decltype(tag);
    auto g = as<T>(x), u = as<T>(dout), dh = as<T>(table);
    std::vector<T> h(n * dim), dg(n * dim), du(n * dim);
    k::swiglu_forward(S, g.data(), u.data(), h.data(), n * dim);
    k::swiglu_backward(S, g.data(), u.data(), dh.data(), dg.data(), du.data(),
                       n * dim);
    return std::vector<Vec>{wide(h), wide(dg), wide(du)};
  });
}

// The float SwiGLU and softmax use a vectorised exponential
// (kernels/src/cpu_vector.hpp); over the range a sigmoid or a softmax sees,
// SwiGLU stays within a few float ulps of the double reference, and non-finite
// gates still give NaN (the shards' NaN guard relies on it).
TEST_CASE("precision swiglu over the exponential's range",
          "[kernels][precision]") {
  const int64_t n = 4001;
  std::vector<float> g(n), u(n, 1.0f), h(n);
  for (int64_t i = 0; i < n; ++i)
    g[i] = -100.0f + 0.05f * float(i);
  k::swiglu_forward(S, g.data(), u.data(), h.data(), n);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i], ref = x / (1.0 + std::exp(-x));
    const double err = std::abs(h[i] - ref) / std::max(std::abs(ref), 1e-30);
    if (std::abs(ref) > 1e-30)
      worst = std::max(worst, err);
  }
  CHECK(worst < 1e-6);
  const float bad[3] = {std::nanf(""), INFINITY, -INFINITY};
  float out[3], ones[3] = {1, 1, 1};
  k::swiglu_forward(S, bad, ones, out, 3);
  CHECK(std::isnan(out[0]));
  CHECK(!std::isfinite(out[1]));
  CHECK(!std::isfinite(out[2]));
}

TEST_CASE("precision attention", "[kernels][precision]") {
  std::mt19937_64 rng(23);
  const int64_t b = 2, s = 16, hq = 4, hkv = 2, d = 8;
  const Vec q = randn_in_float(b * s * hq * d, rng),
            kv = randn_in_float(b * s * hkv * d, rng),
            v = randn_in_float(b * s * hkv * d, rng),
            g = randn_in_float(b * s * hq * d, rng);
  check_op("attention", [&](auto tag) {
    using T = decltype(tag);
    auto qt = as<T>(q), kt = as<T>(kv), vt = as<T>(v), gt = as<T>(g);
    std::vector<T> out(q.size()), p(b * hq * s * s), dq(q.size()),
      dk(kv.size()), dv(v.size());
    k::attention_forward(S, qt.data(), kt.data(), vt.data(), out.data(),
                         p.data(), b, s, hq, hkv, d);
    k::attention_backward(S, qt.data(), kt.data(), vt.data(), p.data(),
                          gt.data(), dq.data(), dk.data(), dv.data(), b, s, hq,
                          hkv, d);
    return std::vector<Vec>{wide(out), wide(p), wide(dq), wide(dk), wide(dv)};
  });
}

TEST_CASE("precision router and aux losses", "[kernels][precision]") {
  std::mt19937_64 rng(24);
  const int64_t n = 12, e = 8, kk = 2, global = 40;
  const Vec logits = randn_in_float(n * e, rng, 2.0),
            bias = randn_in_float(e, rng, 0.3),
            dgate = randn_in_float(n * kk, rng), frac = randn_in_float(e, rng);
  check_op("router", [&](auto tag) {
    using T = decltype(tag);
    auto lt = as<T>(logits), bt = as<T>(bias), dg = as<T>(dgate),
         ft = as<T>(frac);
    std::vector<int32_t> idx(n * kk);
    std::vector<T> gate(n * kk), probs(n * e), dl(n * e), dl2(n * e, T(0));
    k::router_topk_forward(S, lt.data(), bt.data(), idx.data(), gate.data(),
                           probs.data(), n, e, kk, T(0.8));
    k::router_topk_backward(S, idx.data(), gate.data(), dg.data(), dl.data(), n,
                            e, kk, T(0.8));
    const double sw = k::switch_loss_forward(S, probs.data(), ft.data(), n, e,
                                             0.01, global);
    const double z = k::z_loss_forward(S, lt.data(), n, e, 0.001, global);
    k::switch_loss_backward(S, probs.data(), ft.data(), dl2.data(), n, e, 0.01,
                            global, T(0.8));
    k::z_loss_backward(S, lt.data(), dl2.data(), n, e, 0.001, global);
    std::vector<int64_t> counts(e);
    std::vector<int32_t> capped = idx;
    const int64_t dropped = k::apply_capacity(S, capped.data(), gate.data(),
                                              counts.data(), n, e, kk, 3);
    return std::vector<Vec>{Vec(idx.begin(), idx.end()),
                            wide(gate),
                            wide(probs),
                            wide(dl),
                            Vec{sw},
                            Vec{z},
                            wide(dl2),
                            Vec(capped.begin(), capped.end()),
                            Vec(counts.begin(), counts.end()),
                            Vec{double(dropped)}};
  });
}

TEST_CASE("precision dispatch and combine", "[kernels][precision]") {
  std::mt19937_64 rng(25);
  const int64_t n = 10, e = 4, kk = 2, dim = 16;
  std::vector<int32_t> idx(n * kk);
  for (int64_t t = 0; t < n; ++t)
    idx[t * kk] = t % e, idx[t * kk + 1] = (t * 3 + 1) % e;
  idx[5] = -1;
  std::vector<int32_t> slot(n * kk);
  std::vector<int64_t> counts(e);
  const int64_t rows = k::permute_plan(S, idx.data(), n, e, kk, slot.data(),
                                       counts.data());
  const Vec x = randn_in_float(n * dim, rng),
            y = randn_in_float(rows * dim, rng),
            gate = randn_in_float(n * kk, rng),
            dout = randn_in_float(n * dim, rng);
  std::vector<int64_t> perm(rows);
  for (int64_t r = 0; r < rows; ++r)
    perm[r] = (r * 7) % rows; // 7 coprime to 19
  REQUIRE(rows == 19);
  check_op("dispatch", [&](auto tag) {
    using T = decltype(tag);
    auto xt = as<T>(x), yt = as<T>(y), gt = as<T>(gate), dt = as<T>(dout),
         dx = as<T>(x);
    std::vector<T> pr(rows * dim), out(n * dim), dy(rows * dim), dg(n * kk),
      ga(rows * dim), sc(rows * dim);
    k::permute_rows(S, xt.data(), slot.data(), pr.data(), rows, kk, dim);
    k::permute_rows_backward(S, yt.data(), slot.data(), dx.data(), rows, kk,
                             dim);
    k::unpermute_combine(S, yt.data(), slot.data(), gt.data(), out.data(), rows,
                         n, kk, dim);
    k::unpermute_combine_backward(S, dt.data(), yt.data(), slot.data(),
                                  gt.data(), dy.data(), dg.data(), rows, n, kk,
                                  dim);
    k::gather_rows(S, yt.data(), perm.data(), ga.data(), rows, dim);
    k::scatter_rows(S, ga.data(), perm.data(), sc.data(), rows, dim);
    CHECK(sc == yt); // scatter undoes gather
    return std::vector<Vec>{wide(pr), wide(dx), wide(out),
                            wide(dy), wide(dg), wide(ga)};
  });
}

TEST_CASE("precision cross entropy, adamw, reductions",
          "[kernels][precision]") {
  std::mt19937_64 rng(26);
  const int64_t n = 8, vocab = 50, np = 200;
  std::vector<int32_t> targets(n);
  for (int64_t i = 0; i < n; ++i)
    targets[i] = int32_t((i * 13) % vocab);
  const Vec logits = randn_in_float(n * vocab, rng, 3.0),
            p0 = randn_in_float(np, rng), grad = randn_in_float(np, rng, 0.1);
  check_op("cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    auto lt = as<T>(logits);
    std::vector<T> lse(n), d(n * vocab);
    const double l = k::cross_entropy_forward(S, lt.data(), targets.data(),
                                              lse.data(), n, vocab);
    k::cross_entropy_backward(S, lt.data(), targets.data(), lse.data(),
                              d.data(), n, vocab, T(1.0 / n));
    return std::vector<Vec>{Vec{l}, wide(lse), wide(d)};
  });
  check_op("adamw", [&](auto tag) {
    using T = decltype(tag);
    auto p = as<T>(p0), g = as<T>(grad);
    std::vector<T> m(np, T(0)), v(np, T(0));
    for (int64_t step = 1; step <= 5; ++step)
      k::adamw_step(S, p.data(), g.data(), m.data(), v.data(), np, 1e-3, 0.9,
                    0.95, 1e-8, 0.1, step, 0.5);
    return std::vector<Vec>{wide(p), wide(m), wide(v)};
  });
  // Out of place (the expert shards' double-buffered state) gives the same
  // bits as in place, and leaves its inputs as they were.
  check_op("adamw_step_into", [&](auto tag) {
    using T = decltype(tag);
    auto p = as<T>(p0), g = as<T>(grad), q = as<T>(p0);
    std::vector<T> m(np, T(0)), v(np, T(0)), m2 = m, v2 = v;
    std::vector<T> p_out(np), m_out(np), v_out(np);
    for (int64_t step = 1; step <= 5; ++step) {
      k::adamw_step(S, p.data(), g.data(), m.data(), v.data(), np, 1e-3, 0.9,
                    0.95, 1e-8, 0.1, step, 0.5);
      const auto q_before = q;
      k::adamw_step_into(S, q.data(), g.data(), m2.data(), v2.data(),
                         p_out.data(), m_out.data(), v_out.data(), np, 1e-3,
                         0.9, 0.95, 1e-8, 0.1, step, 0.5);
      CHECK(q == q_before);
      q = p_out, m2 = m_out, v2 = v_out;
    }
    CHECK(q == p);
    CHECK(m2 == m);
    CHECK(v2 == v);
    return std::vector<Vec>{wide(q), wide(m2), wide(v2)};
  });
  check_op("reductions", [&](auto tag) {
    using T = decltype(tag);
    auto x = as<T>(p0), y = as<T>(grad);
    const double ss = k::sum_squares(S, x.data(), np);
    k::axpy(S, T(0.5), x.data(), y.data(), np);
    std::vector<T> z = x;
    k::fill_zero(S, z.data(), np);
    CHECK(z == std::vector<T>(np, T(0)));
    return std::vector<Vec>{Vec{ss}, wide(y)};
  });
}

// The experts' output guard classifies values; it never squares them (a
// double's square overflows from |x| ~ 1.3e154 on).
TEST_CASE("all_finite: huge values are finite, NaN and inf are not",
          "[kernels][precision]") {
  std::vector<double> d(1000, 0.5);
  std::vector<float> f(1000, 0.5f);
  CHECK(k::all_finite(S, d.data(), 1000));
  d[3] = 1e200;
  d[999] = -1e300;
  f[3] = 3e38f;
  CHECK(k::all_finite(S, d.data(), 1000));
  CHECK(k::all_finite(S, f.data(), 1000));
  d[500] = std::numeric_limits<double>::infinity();
  f[999] = std::numeric_limits<float>::quiet_NaN();
  CHECK(!k::all_finite(S, d.data(), 1000));
  CHECK(!k::all_finite(S, f.data(), 1000));
}

// Not run by default (timing on a shared machine): `test_kernels_precision
// [perf]`. The attention of one layer runs every training step.
TEST_CASE("attention speed", "[.][perf]") {
  k::use_single_threaded_blas();
  std::mt19937_64 rng(27);
  const int64_t b = 8, s = 64, hq = 4, hkv = 2, d = 16;
  auto q = as<float>(randn_in_float(b * s * hq * d, rng)),
       kv = as<float>(randn_in_float(b * s * hkv * d, rng)),
       v = as<float>(randn_in_float(b * s * hkv * d, rng)),
       g = as<float>(randn_in_float(b * s * hq * d, rng));
  std::vector<float> out(q.size()), p(b * hq * s * s), dq(q.size()),
    dk(kv.size()), dv(v.size());
  double best = 1e9;
  for (int rep = 0; rep < 20; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    k::attention_forward(S, q.data(), kv.data(), v.data(), out.data(), p.data(),
                         b, s, hq, hkv, d);
    k::attention_backward(S, q.data(), kv.data(), v.data(), p.data(), g.data(),
                          dq.data(), dk.data(), dv.data(), b, s, hq, hkv, d);
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best,
                    std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  WARN("attention fwd+bwd (b8 s64 hq4 hkv2 d16, float): best " << best
                                                               << " ms");
  CHECK(best < 10.0);
}
