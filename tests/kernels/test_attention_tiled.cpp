// The tiled (flash) attention on the CPU against a float64 reference that
// builds the whole [s, s] softmax: out and each row's log-sum-exp forward,
// dq, dk, dv backward, in fp32 (1e-5 normwise relative) and fp64 (1e-12),
// on shapes that fill one tile, cross several with a partial last one, and
// hold a single token; the same within the same tolerance as the
// [s, s]-keeping attention_forward/backward (which the finite-difference
// test checks); twice the same bits. And the rule that picks the tiled ops:
// CUDA always, the CPU above kAttentionTiledAbove tokens.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
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

struct shape {
  int64_t b, s, hq, hkv, d;
};

struct grads {
  Vec out, lse, dq, dk, dv;
};

// The definition, in double: P = softmax(scale q k^T) over keys <= query,
// out = P v; dP = dout v^T, dS = P * (dP - rowsum(P * dP)), dq = scale dS k,
// dk = scale dS^T q and dv = P^T dout, summed over a kv head's query heads.
grads reference(const shape& x, const Vec& q, const Vec& kk, const Vec& v,
                const Vec& dout) {
  const int64_t S = x.s, d = x.d, ldq = x.hq * d, ldk = x.hkv * d;
  const double scale = 1.0 / std::sqrt(double(d));
  grads g{Vec(q.size()), Vec(x.b * x.hq * S), Vec(q.size()), Vec(kk.size()),
          Vec(v.size())};
  Vec p(S * S), ds(S * S);
  for (int64_t b = 0; b < x.b; ++b)
    for (int64_t h = 0; h < x.hq; ++h) {
      const int64_t kh = h / (x.hq / x.hkv);
      auto Q = [&](int64_t i, int64_t c) { return q[(b * S + i) * ldq + h * d + c]; };
      auto K = [&](int64_t j, int64_t c) { return kk[(b * S + j) * ldk + kh * d + c]; };
      auto V = [&](int64_t j, int64_t c) { return v[(b * S + j) * ldk + kh * d + c]; };
      auto G = [&](int64_t i, int64_t c) { return dout[(b * S + i) * ldq + h * d + c]; };
      for (int64_t i = 0; i < S; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += Q(i, c) * K(j, c);
          p[i * S + j] = scale * dot;
          mx = std::max(mx, p[i * S + j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j)
          sum += std::exp(p[i * S + j] - mx);
        g.lse[(b * x.hq + h) * S + i] = mx + std::log(sum);
        for (int64_t j = 0; j <= i; ++j)
          p[i * S + j] = std::exp(p[i * S + j] - mx) / sum;
        double rowdot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dp = 0;
          for (int64_t c = 0; c < d; ++c)
            dp += G(i, c) * V(j, c);
          ds[i * S + j] = dp;
          rowdot += p[i * S + j] * dp;
        }
        for (int64_t j = 0; j <= i; ++j)
          ds[i * S + j] = p[i * S + j] * (ds[i * S + j] - rowdot);
        for (int64_t c = 0; c < d; ++c) {
          double o = 0, gq = 0;
          for (int64_t j = 0; j <= i; ++j) {
            o += p[i * S + j] * V(j, c);
            gq += ds[i * S + j] * K(j, c);
          }
          g.out[(b * S + i) * ldq + h * d + c] = o;
          g.dq[(b * S + i) * ldq + h * d + c] = scale * gq;
        }
      }
      for (int64_t j = 0; j < S; ++j)
        for (int64_t c = 0; c < d; ++c) {
          double gk = 0, gv = 0;
          for (int64_t i = j; i < S; ++i) {
            gk += ds[i * S + j] * Q(i, c);
            gv += p[i * S + j] * G(i, c);
          }
          g.dk[(b * S + j) * ldk + kh * d + c] += scale * gk;
          g.dv[(b * S + j) * ldk + kh * d + c] += gv;
        }
    }
  return g;
}

// The tiled ops in T; outputs poisoned first, so an element left unwritten
// shows up as NaN.
template <class T>
grads tiled(const shape& x, const Vec& q, const Vec& kk, const Vec& v,
            const Vec& dout) {
  const auto s = k::cpu_stream();
  const auto qt = as<T>(q), kt = as<T>(kk), vt = as<T>(v), gt = as<T>(dout);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> out(q.size(), nan), lse(x.b * x.hq * x.s, nan),
    dq(q.size(), nan), dk(kk.size(), nan), dv(v.size(), nan);
  k::attention_forward_tiled(s, qt.data(), kt.data(), vt.data(), out.data(),
                             lse.data(), x.b, x.s, x.hq, x.hkv, x.d);
  k::attention_backward_tiled(s, qt.data(), kt.data(), vt.data(), out.data(),
                              lse.data(), gt.data(), dq.data(), dk.data(),
                              dv.data(), x.b, x.s, x.hq, x.hkv, x.d);
  return {wide(out), wide(lse), wide(dq), wide(dk), wide(dv)};
}

// The [s, s]-keeping ops in T (no lse).
template <class T>
grads full(const shape& x, const Vec& q, const Vec& kk, const Vec& v,
           const Vec& dout) {
  const auto s = k::cpu_stream();
  const auto qt = as<T>(q), kt = as<T>(kk), vt = as<T>(v), gt = as<T>(dout);
  std::vector<T> out(q.size()), p(x.b * x.hq * x.s * x.s), dq(q.size()),
    dk(kk.size()), dv(v.size());
  k::attention_forward(s, qt.data(), kt.data(), vt.data(), out.data(),
                       p.data(), x.b, x.s, x.hq, x.hkv, x.d);
  k::attention_backward(s, qt.data(), kt.data(), vt.data(), p.data(),
                        gt.data(), dq.data(), dk.data(), dv.data(), x.b, x.s,
                        x.hq, x.hkv, x.d);
  return {wide(out), {}, wide(dq), wide(dk), wide(dv)};
}

void check_close(const grads& got, const grads& ref, double tol) {
  const std::pair<const char*, std::pair<const Vec*, const Vec*>> parts[] = {
    {"out", {&got.out, &ref.out}},
    {"lse", {&got.lse, &ref.lse}},
    {"dq", {&got.dq, &ref.dq}},
    {"dk", {&got.dk, &ref.dk}},
    {"dv", {&got.dv, &ref.dv}}};
  for (const auto& [name, pair] : parts) {
    if (pair.first->empty() || pair.second->empty())
      continue;
    INFO(name << ": relative error against float64 "
              << rel_err(*pair.first, *pair.second) << " (tolerance " << tol
              << ")");
    REQUIRE(pair.first->size() == pair.second->size());
    CHECK(rel_err(*pair.first, *pair.second) <= tol);
  }
}

bool same_bits(const grads& a, const grads& b) {
  using both = std::pair<const Vec*, const Vec*>;
  for (auto [x, y] : {both{&a.out, &b.out}, both{&a.lse, &b.lse},
                      both{&a.dq, &b.dq}, both{&a.dk, &b.dk},
                      both{&a.dv, &b.dv}})
    if (x->size() != y->size()
        || std::memcmp(x->data(), y->data(), x->size() * sizeof(double)) != 0)
      return false;
  return true;
}

} // namespace

TEST_CASE("tiled attention against the float64 reference", "[kernels]") {
  k::use_single_threaded_blas();
  std::mt19937_64 rng(41);
  // One whole tile (64); three tiles, the last partial, GQA 4:2; one token;
  // GQA 6:1 across two tiles.
  // And a sequence above kAttentionTiledAbove, which training runs tiled.
  for (const shape x : {shape{1, 64, 2, 1, 8}, shape{2, 150, 4, 2, 16},
                        shape{2, 1, 2, 2, 8}, shape{1, 100, 6, 1, 32},
                        shape{1, 600, 2, 1, 8}}) {
    INFO("batch " << x.b << " seq " << x.s << " heads " << x.hq << ":"
                  << x.hkv << " head_dim " << x.d);
    const Vec q = randn_in_float(x.b * x.s * x.hq * x.d, rng),
              kk = randn_in_float(x.b * x.s * x.hkv * x.d, rng),
              v = randn_in_float(x.b * x.s * x.hkv * x.d, rng),
              g = randn_in_float(x.b * x.s * x.hq * x.d, rng);
    const grads ref = reference(x, q, kk, v, g);
    const grads f32 = tiled<float>(x, q, kk, v, g);
    const grads f64 = tiled<double>(x, q, kk, v, g);
    check_close(f32, ref, 1e-5);
    check_close(f64, ref, 1e-12);
    // The [s, s] path agrees with the same reference, so the two are
    // interchangeable to within rounding.
    check_close(full<float>(x, q, kk, v, g), ref, 1e-5);
    check_close(full<double>(x, q, kk, v, g), ref, 1e-12);
    CHECK(same_bits(f32, tiled<float>(x, q, kk, v, g)));
    CHECK(same_bits(f64, tiled<double>(x, q, kk, v, g)));
  }
}

TEST_CASE("attention is tiled on CUDA and for long sequences on the CPU",
          "[kernels]") {
  using k::device_kind;
  CHECK(k::attention_is_tiled(device_kind::cuda, 64));
  CHECK(k::attention_is_tiled(device_kind::cuda, 4096));
  CHECK_FALSE(k::attention_is_tiled(device_kind::cpu, 256));
  CHECK_FALSE(k::attention_is_tiled(device_kind::cpu, k::kAttentionTiledAbove));
  CHECK(k::attention_is_tiled(device_kind::cpu, k::kAttentionTiledAbove + 1));
  CHECK(k::attention_saved_per_head(device_kind::cuda, 4096) == 4096);
  CHECK(k::attention_saved_per_head(device_kind::cpu, 256) == 256 * 256);
}
