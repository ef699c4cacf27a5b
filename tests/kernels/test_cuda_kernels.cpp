// Every CUDA op against the CPU reference (label gpu).
//
// Fresh random inputs each run (the seed is printed; TUTTI_TEST_SEED
// repeats one), outputs poisoned before the op, fp32 within 1e-5 normwise
// relative error of the CPU in fp32, fp64 within 1e-10, bf16 GEMMs within
// 1e-2 of the fp32 CPU result; integer outputs (routing, plans, counts)
// identical; two GPU runs bitwise identical; the batch-invariant GEMM
// bitwise the CPU's, alone or in any batch. Where no device answers, the
// program prints why and exits 77, which CTest reports as skipped.

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>

#include "cuda_test_support.hpp"

using namespace tutti::testing;

namespace {

uint64_t seed = 0;
std::unique_ptr<k::device_stream> fp32_stream, bf16_stream;

std::mt19937_64 rng_for(int test) {
  return std::mt19937_64(seed * 1000 + test);
}

// Runs the body in fp32 and fp64 against the CPU.
template <class Body>
void check_both(const char* op, Body body) {
  check_backends<float>(op, fp32_stream->get(), 1e-5, body);
  check_backends<double>(op, fp32_stream->get(), 1e-10, body);
}

std::vector<int32_t> random_ints(size_t n, int32_t lo, int32_t hi,
                                 std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

} // namespace

TEST_CASE("cuda linear and grouped linear", "[gpu]") {
  auto rng = rng_for(1);
  const int64_t m = 205, kk = 256, n = 320, G = 6;
  const std::vector<int64_t> rows = {37, 0, 120, 5, 0, 43}; // sums to m
  const Vec x = randn_in_float(m * kk, rng),
            w = randn_in_float(G * n * kk, rng),
            dy = randn_in_float(m * n, rng),
            dw0 = randn_in_float(G * n * kk, rng);
  auto body = [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const T *xp = be.in(as<T>(x)), *wp = be.in(as<T>(w)),
            *dyp = be.in(as<T>(dy));
    T *y = be.out<T>(m * n), *dx = be.out<T>(m * kk), *dw = be.in(as<T>(dw0));
    T *gy = be.out<T>(m * n), *gdx = be.out<T>(m * kk),
      *gdw = be.in(as<T>(dw0));
    k::linear_forward(be.s, xp, wp, y, m, kk, n);
    k::linear_backward(be.s, xp, wp, dyp, dx, dw, m, kk, n);
    // Forward reads device rows on CUDA, backward host rows: both allowed.
    k::grouped_linear_forward(be.s, xp, wp, be.in(rows), G, gy, kk, n);
    k::grouped_linear_backward(be.s, xp, wp, dyp, rows.data(), G, gdx, gdw, kk,
                               n);
    // linear_backward's parts: dx overwritten then added to, dw's rows in
    // two tiles.
    T *pdx = be.out<T>(m * kk), *pdw = be.in(as<T>(dw0));
    k::linear_input_grad(be.s, wp, dyp, pdx, m, kk, n, false);
    k::linear_input_grad(be.s, wp, dyp, pdx, m, kk, n, true);
    k::linear_weight_grad_rows(be.s, xp, dyp, pdw, m, kk, n, 0, 100);
    k::linear_weight_grad_rows(be.s, xp, dyp, pdw, m, kk, n, 100, n - 100);
    return {be.f("y", y, m * n),
            be.f("input grad, twice", pdx, m * kk),
            be.f("weight grad rows", pdw, n * kk),
            be.f("dx", dx, m * kk),
            be.f("dw", dw, n * kk),
            be.f("grouped y", gy, m * n),
            be.f("grouped dx", gdx, m * kk),
            be.f("grouped dw", gdw, G * n * kk)};
  };
  check_both("linear", body);
  // bf16 inputs, fp32 accumulation: against the fp32 CPU result.
  check_backends<float>("linear bf16", bf16_stream->get(), 1e-2, body);
}

TEST_CASE("cuda embedding, rmsnorm, rope, swiglu", "[gpu]") {
  auto rng = rng_for(2);
  const int64_t vocab = 1000, dim = 256, n = 512;
  auto ids = random_ints(n, 0, vocab - 1, rng);
  for (int64_t i = 0; i < n; i += 3)
    ids[i] = ids[i] % 17; // many repeats
  const Vec table = randn_in_float(vocab * dim, rng),
            dout = randn_in_float(n * dim, rng), w = randn_in_float(dim, rng),
            x = randn_in_float(n * dim, rng, 3.0);
  check_both("embedding", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const int32_t* idp = be.in(ids);
    T *out = be.out<T>(n * dim), *dt = be.in(as<T>(table));
    k::embedding_forward(be.s, idp, dt, out, n, dim);
    k::embedding_backward(be.s, idp, be.in(as<T>(dout)), dt, n, dim);
    return {be.f("out", out, n * dim), be.f("dtable", dt, vocab * dim)};
  });
  check_both("rmsnorm", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const T *xp = be.in(as<T>(x)), *wp = be.in(as<T>(w));
    T *y = be.out<T>(n * dim), *r = be.out<T>(n), *dx = be.out<T>(n * dim),
      *dw = be.in(as<T>(w));
    k::rmsnorm_forward(be.s, xp, wp, y, r, n, dim, T(1e-5));
    k::rmsnorm_backward(be.s, xp, wp, r, be.in(as<T>(dout)), dx, dw, n, dim);
    return {be.f("y", y, n * dim), be.f("rstd", r, n), be.f("dx", dx, n * dim),
            be.f("dw", dw, dim)};
  });
  check_both("rope", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    // [batch 2, seq 64, heads 4, head_dim 256 / 4 * ...]: n * dim values.
    const int64_t b = 2, s = 64, h = 4, d = n * dim / (b * s * h);
    T *y = be.in(as<T>(x)), *dx = be.in(as<T>(dout));
    k::rope_forward(be.s, y, b, s, h, d, 10000.0);
    k::rope_backward(be.s, dx, b, s, h, d, 10000.0);
    return {be.f("x", y, n * dim), be.f("dx", dx, n * dim)};
  });
  check_both("swiglu", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const int64_t len = n * dim;
    const T *g = be.in(as<T>(x)), *u = be.in(as<T>(dout));
    T *h = be.out<T>(len), *dg = be.out<T>(len), *du = be.out<T>(len);
    k::swiglu_forward(be.s, g, u, h, len);
    k::swiglu_backward(be.s, g, u, be.in(as<T>(x)), dg, du, len);
    return {be.f("h", h, len), be.f("dgate", dg, len), be.f("dup", du, len)};
  });
}

TEST_CASE("cuda attention", "[gpu]") {
  auto rng = rng_for(3);
  const int64_t b = 2, s = 96, hq = 8, hkv = 2, d = 64;
  const Vec q = randn_in_float(b * s * hq * d, rng),
            kv = randn_in_float(b * s * hkv * d, rng),
            v = randn_in_float(b * s * hkv * d, rng),
            g = randn_in_float(b * s * hq * d, rng);
  check_both("attention", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const T *qp = be.in(as<T>(q)), *kp = be.in(as<T>(kv)),
            *vp = be.in(as<T>(v));
    T *out = be.out<T>(q.size()), *p = be.out<T>(b * hq * s * s),
      *dq = be.out<T>(q.size()), *dk = be.out<T>(kv.size()),
      *dv = be.out<T>(v.size());
    k::attention_forward(be.s, qp, kp, vp, out, p, b, s, hq, hkv, d);
    k::attention_backward(be.s, qp, kp, vp, p, be.in(as<T>(g)), dq, dk, dv, b,
                          s, hq, hkv, d);
    return {be.f("out", out, q.size()), be.f("probs", p, b * hq * s * s),
            be.f("dq", dq, q.size()), be.f("dk", dk, kv.size()),
            be.f("dv", dv, v.size())};
  });
}

// The tiled kernels against the CPU's tiled ones, at a length that crosses
// several tiles of both (CPU 64, CUDA 32 / 16) with a partial last one.
TEST_CASE("cuda tiled attention", "[gpu]") {
  auto rng = rng_for(7);
  const int64_t b = 2, s = 200, hq = 8, hkv = 2, d = 64;
  const Vec q = randn_in_float(b * s * hq * d, rng),
            kv = randn_in_float(b * s * hkv * d, rng),
            v = randn_in_float(b * s * hkv * d, rng),
            g = randn_in_float(b * s * hq * d, rng);
  check_both("attention (tiled)", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const T *qp = be.in(as<T>(q)), *kp = be.in(as<T>(kv)),
            *vp = be.in(as<T>(v));
    T *out = be.out<T>(q.size()), *lse = be.out<T>(b * hq * s),
      *dq = be.out<T>(q.size()), *dk = be.out<T>(kv.size()),
      *dv = be.out<T>(v.size());
    k::attention_forward_tiled(be.s, qp, kp, vp, out, lse, b, s, hq, hkv, d);
    k::attention_backward_tiled(be.s, qp, kp, vp, out, lse, be.in(as<T>(g)),
                                dq, dk, dv, b, s, hq, hkv, d);
    return {be.f("out", out, q.size()), be.f("lse", lse, b * hq * s),
            be.f("dq", dq, q.size()), be.f("dk", dk, kv.size()),
            be.f("dv", dv, v.size())};
  });
}

// Serving's batch invariance on the GPU: every output is the CPU's chain of
// fused multiply-adds, so the GPU gives the CPU's bits, and a row's bits
// alone, in a batch of 37, or at an odd offset of a batch of 5.
TEST_CASE("cuda batch-invariant GEMM: the CPU's bits in any batch", "[gpu]") {
  auto rng = rng_for(8);
  const int64_t m = 37, kk = 300, n = 200; // n, k not multiples of the tiles
  const Vec x = randn_in_float(m * kk, rng), w = randn_in_float(n * kk, rng);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const auto xt = as<T>(x);
    std::vector<T> wt(kk * n);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t t = 0; t < kk; ++t)
        wt[t * n + j] = T(w[j * kk + t]);
    std::vector<T> ref(m * n);
    k::invariant_linear_forward(k::cpu_stream(), xt.data(), kk, wt.data(),
                                ref.data(), n, m, kk, n);
    backend gpu(fp32_stream->get());
    const T *xp = gpu.in(xt), *wp = gpu.in(wt);
    T *all = gpu.out<T>(m * n), *five = gpu.out<T>(5 * n),
      *one = gpu.out<T>(n);
    k::invariant_linear_forward(gpu.s, xp, kk, wp, all, n, m, kk, n);
    const Vec got = gpu.f("batch", all, m * n).values;
    INFO((sizeof(T) == 4 ? "fp32" : "fp64"));
    CHECK(got == Vec(ref.begin(), ref.end()));
    for (int64_t i = 0; i < m; ++i) {
      k::invariant_linear_forward(gpu.s, xp + i * kk, kk, wp, one, n, 1, kk,
                                  n);
      const Vec alone = gpu.f("row", one, n).values;
      INFO("row " << i);
      CHECK(std::equal(alone.begin(), alone.end(), got.begin() + i * n));
    }
    const int64_t first = 3;
    k::invariant_linear_forward(gpu.s, xp + first * kk, kk, wp, five, n, 5,
                                kk, n);
    const Vec some = gpu.f("five", five, 5 * n).values;
    CHECK(std::equal(some.begin(), some.end(), got.begin() + first * n));
  };
  run(float{});
  run(double{});
}

TEST_CASE("cuda router, aux losses, capacity, bias", "[gpu]") {
  auto rng = rng_for(4);
  const int64_t n = 1000, e = 16, kk = 2, global = 4000;
  const Vec logits = randn_in_float(n * e, rng, 2.0),
            bias = randn_in_float(e, rng, 0.3),
            dgate = randn_in_float(n * kk, rng), frac = randn_in_float(e, rng),
            daux = randn_in_float(n * e, rng);
  std::vector<int64_t> global_counts(e);
  for (auto& c : global_counts)
    c = rng() % 600;
  const int64_t cap = k::expert_capacity(1.0, n, kk, e); // drops some
  check_both("router", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const T *lp = be.in(as<T>(logits)), *fp = be.in(as<T>(frac));
    int32_t* idx = be.out<int32_t>(n * kk);
    T *gate = be.out<T>(n * kk), *probs = be.out<T>(n * e),
      *dl = be.out<T>(n * e), *dl2 = be.in(as<T>(daux));
    k::router_topk_forward(be.s, lp, be.in(as<T>(bias)), idx, gate, probs, n, e,
                           kk, T(0.8));
    k::router_topk_backward(be.s, idx, gate, be.in(as<T>(dgate)), dl, n, e, kk,
                            T(0.8));
    // Gates without renormalisation (Qwen3-MoE, norm_topk_prob false).
    T *all_gate = be.out<T>(n * kk), *all_dl = be.out<T>(n * e);
    k::router_gates_from_probs(be.s, idx, probs, all_gate, n, e, kk);
    k::router_gates_from_probs_backward(be.s, idx, probs, be.in(as<T>(dgate)),
                                        all_dl, n, e, kk, T(0.8));
    const double sw = k::switch_loss_forward(be.s, probs, fp, n, e, 0.01,
                                             global);
    const double z = k::z_loss_forward(be.s, lp, n, e, 0.001, global);
    k::switch_loss_backward(be.s, probs, fp, dl2, n, e, 0.01, global, T(0.8));
    k::z_loss_backward(be.s, lp, dl2, n, e, 0.001, global);
    output topk = be.i("topk idx", idx, n * kk); // before capacity edits it
    int64_t* counts = be.out<int64_t>(e);
    const int64_t dropped = k::apply_capacity(be.s, idx, gate, counts, n, e, kk,
                                              cap);
    T* b2 = be.in(as<T>(bias));
    k::bias_update(be.s, b2, be.in(global_counts), e, 0.001);
    return {topk,
            be.i("capped idx", idx, n * kk),
            be.f("gate", gate, n * kk),
            be.f("probs", probs, n * e),
            be.f("dlogits", dl, n * e),
            be.f("gates from probs", all_gate, n * kk),
            be.f("dlogits from probs", all_dl, n * e),
            {"switch loss", Vec{sw}, false},
            {"z loss", Vec{z}, false},
            be.f("aux dlogits", dl2, n * e),
            be.i("counts", counts, e),
            {"dropped", Vec{double(dropped)}, true},
            be.f("bias", b2, e)};
  });
}

TEST_CASE("cuda group-limited sigmoid router (DeepSeek-V3)", "[gpu]") {
  auto rng = rng_for(14);
  const int64_t n = 1000, e = 16, kk = 4, groups = 4, kept = 2;
  const Vec logits = randn_in_float(n * e, rng, 2.0),
            bias = randn_in_float(e, rng, 0.3),
            dgate = randn_in_float(n * kk, rng);
  check_both("sigmoid router", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const T* lp = be.in(as<T>(logits));
    int32_t* idx = be.out<int32_t>(n * kk);
    T *gate = be.out<T>(n * kk), *dl = be.out<T>(n * e);
    k::router_sigmoid_forward(be.s, lp, be.in(as<T>(bias)), idx, gate, n, e, kk,
                              groups, kept, true, 2.5);
    k::router_sigmoid_backward(be.s, idx, lp, be.in(as<T>(dgate)), dl, n, e, kk,
                               true, 2.5);
    return {be.i("topk idx", idx, n * kk), be.f("gate", gate, n * kk),
            be.f("dlogits", dl, n * e)};
  });
}

TEST_CASE("cuda permute, combine, gather, scatter", "[gpu]") {
  auto rng = rng_for(5);
  const int64_t n = 600, e = 8, kk = 2, dim = 256;
  std::vector<int32_t> idx(n * kk);
  for (int64_t t = 0; t < n; ++t) {
    idx[t * kk] = int32_t(rng() % e);
    idx[t * kk + 1] = int32_t((idx[t * kk] + 1 + rng() % (e - 1)) % e);
  }
  for (int64_t s = 0; s < n * kk; s += 7)
    idx[s] = -1; // dropped slots
  const Vec x = randn_in_float(n * dim, rng),
            gate = randn_in_float(n * kk, rng),
            dout = randn_in_float(n * dim, rng),
            yall = randn_in_float(n * kk * dim, rng);
  check_both("dispatch", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    int32_t* slot = be.out<int32_t>(n * kk);
    int64_t* counts = be.out<int64_t>(e);
    const int64_t rows = k::permute_plan(be.s, be.in(idx), n, e, kk, slot,
                                         counts);
    const Vec y(yall.begin(), yall.begin() + rows * dim);
    std::vector<int64_t> perm(rows);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
    const T *yp = be.in(as<T>(y)), *gp = be.in(as<T>(gate));
    const int64_t* pp = be.in(perm);
    T *pr = be.out<T>(rows * dim), *dx = be.in(as<T>(x)),
      *out = be.out<T>(n * dim), *dy = be.out<T>(rows * dim),
      *dg = be.out<T>(n * kk), *ga = be.out<T>(rows * dim),
      *sc = be.out<T>(rows * dim);
    k::permute_rows(be.s, be.in(as<T>(x)), slot, pr, rows, kk, dim);
    k::permute_rows_backward(be.s, yp, slot, dx, rows, kk, dim);
    k::unpermute_combine(be.s, yp, slot, gp, out, rows, n, kk, dim);
    k::unpermute_combine_backward(be.s, be.in(as<T>(dout)), yp, slot, gp, dy,
                                  dg, rows, n, kk, dim);
    k::gather_rows(be.s, yp, pp, ga, rows, dim);
    k::scatter_rows(be.s, ga, pp, sc, rows, dim);
    return {
      {"rows", Vec{double(rows)}, true}, be.i("slot_of_row", slot, rows),
      be.i("counts", counts, e),         be.f("permuted", pr, rows * dim),
      be.f("dx", dx, n * dim),           be.f("combined", out, n * dim),
      be.f("dy", dy, rows * dim),        be.f("dgate", dg, n * kk),
      be.f("gathered", ga, rows * dim),  be.f("scattered", sc, rows * dim)};
  });
}

TEST_CASE("cuda cross entropy, adamw, reductions", "[gpu]") {
  auto rng = rng_for(6);
  const int64_t n = 64, vocab = 5000, np = 10000;
  auto targets = random_ints(n, 0, vocab - 1, rng);
  targets[3] = targets[40] = -100; // ignored rows
  const Vec logits = randn_in_float(n * vocab, rng, 3.0),
            p0 = randn_in_float(np, rng), grad = randn_in_float(np, rng, 0.1);
  check_both("cross_entropy", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const T* lp = be.in(as<T>(logits));
    const int32_t* tp = be.in(targets);
    T *lse = be.out<T>(n), *d = be.out<T>(n * vocab);
    const double l = k::cross_entropy_forward(be.s, lp, tp, lse, n, vocab);
    k::cross_entropy_backward(be.s, lp, tp, lse, d, n, vocab, T(1.0 / n));
    return {{"loss", Vec{l}, false},
            be.f("lse", lse, n),
            be.f("dlogits", d, n * vocab)};
  });
  check_both("adamw", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    T *p = be.in(as<T>(p0)), *m = be.in(std::vector<T>(np, T(0))),
      *v = be.in(std::vector<T>(np, T(0)));
    const T* g = be.in(as<T>(grad));
    for (int64_t step = 1; step <= 5; ++step)
      k::adamw_step(be.s, p, g, m, v, np, 1e-3, 0.9, 0.95, 1e-8, 0.1, step,
                    0.5);
    return {be.f("param", p, np), be.f("m", m, np), be.f("v", v, np)};
  });
  check_both("reductions", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const T* x = be.in(as<T>(p0));
    T *y = be.in(as<T>(grad)), *z = be.out<T>(np);
    const double ss = k::sum_squares(be.s, x, np);
    k::axpy(be.s, T(0.5), x, y, np);
    k::fill_zero(be.s, z, np);
    return {{"sum_squares", Vec{ss}, false},
            be.f("axpy", y, np),
            be.i("fill_zero", z, np)};
  });
  // The experts' output guard classifies values: a huge finite value (its
  // square overflows) is finite, a NaN or an infinity anywhere is not.
  check_both("all_finite", [&](backend& be, auto tag) -> outputs {
    using T = decltype(tag);
    const T huge = sizeof(T) == 8 ? T(1e200) : T(1e30);
    std::vector<T> big = as<T>(p0), nan = big, inf = big;
    big[17] = huge;
    big[np - 1] = -huge;
    nan[np / 2] = std::numeric_limits<T>::quiet_NaN();
    inf[np - 1] = std::numeric_limits<T>::infinity();
    const Vec flags{double(k::all_finite(be.s, be.in(as<T>(p0)), np)),
                    double(k::all_finite(be.s, be.in(big), np)),
                    double(k::all_finite(be.s, be.in(nan), np)),
                    double(k::all_finite(be.s, be.in(inf), np))};
    CHECK(flags == Vec{1, 1, 0, 0});
    return {{"all_finite", flags, true}};
  });
}

int main(int argc, char** argv) {
  if (auto device = k::cuda_device_available(); !device) {
    std::printf("SKIPPED test_cuda_kernels: %s\n", device.message().c_str());
    return 77; // CTest: SKIP_RETURN_CODE
  }
  const char* env = std::getenv("TUTTI_TEST_SEED");
  seed = env ? std::strtoull(env, nullptr, 10)
             : std::random_device{}() % 1000000;
  std::printf(
    "device: %s\nseed: %llu (TUTTI_TEST_SEED=%llu repeats this run)\n",
    k::cuda_device_description().c_str(), (unsigned long long)seed,
    (unsigned long long)seed);
  fp32_stream = std::make_unique<k::device_stream>();
  bf16_stream = std::make_unique<k::device_stream>(k::gemm_precision::bf16);
  const int result = Catch::Session().run(argc, argv);
  fp32_stream.reset();
  bf16_stream.reset();
  return result;
}
