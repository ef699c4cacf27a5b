// GPU benchmark table, each figure next to an anchor measured
// in the same run on the same GPU:
//   - experts' grouped GEMM TFLOP/s (fp32, bf16) vs one cuBLAS GEMM of the
//     same FLOPs (same rows in total, same k and n);
//   - permute / unpermute-combine GB/s vs a device-to-device cudaMemcpy of
//     the same bytes (bytes read + written, both sides);
//   - one MoE layer forward + backward vs the same layer in PyTorch (time
//     passed in with --torch-moe-ms by bench/gpu_check.sh, which runs
//     bench/moe_layer_torch.py with the same sizes first).
// Timing: CUDA events around `iters` launches after warm-up, median of 5.
// Ratios are "higher is better" for tutti: figure / anchor for rates,
// anchor / figure for times.

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"

namespace k = tutti::kernels;
using tutti::bench::fmt;

namespace {

#define BENCH_CUDA(call)                                                       \
  do {                                                                         \
    const cudaError_t e_ = (call);                                             \
    if (e_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n",                     \
                   cudaGetErrorString(e_), __FILE__, __LINE__, #call);         \
      std::exit(2);                                                            \
    }                                                                          \
  } while (0)

struct sizes {
  int64_t tokens = 4096, dim = 1024, ffn = 2816, experts = 8, topk = 2;
  int64_t gemm_tokens = 8192, gemm_dim = 2048, gemm_ffn = 5632;
  int iters = 10;
  double torch_moe_ms = 0.0;
};

// Median over 5 samples of the mean time of `iters` runs of fn, in ms.
double time_ms(const k::stream& s, int iters, const std::function<void()>& fn) {
  auto h = static_cast<cudaStream_t>(s.handle);
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i)
    fn(); // warm-up: handles, scratch, clocks
  std::vector<double> samples;
  for (int rep = 0; rep < 5; ++rep) {
    BENCH_CUDA(cudaEventRecord(a, h));
    for (int i = 0; i < iters; ++i)
      fn();
    BENCH_CUDA(cudaEventRecord(b, h));
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    samples.push_back(double(ms) / iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return tutti::bench::median(samples);
}

k::device_array<float> random_device(const k::stream& s, size_t n, double scale,
                                     std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, float(scale));
  std::vector<float> h(n);
  for (auto& v : h)
    v = d(rng);
  k::device_array<float> out(n);
  k::copy_to_device(s, out.data(), h.data(), out.bytes());
  return out;
}

// A realistic, uneven split of tokens * topk rows over the experts: the
// plan of a random top-k routing.
struct routing {
  k::device_array<int32_t> idx, slot;
  k::device_array<float> gate;
  k::device_array<int64_t> counts_dev;
  std::vector<int64_t> counts;
  int64_t rows = 0;
};

routing route(const k::stream& s, int64_t tokens, int64_t experts, int64_t topk,
              std::mt19937_64& rng) {
  routing r;
  auto logits = random_device(s, size_t(tokens * experts), 1.0, rng);
  r.idx = k::device_array<int32_t>(tokens * topk);
  r.slot = k::device_array<int32_t>(tokens * topk);
  r.gate = k::device_array<float>(tokens * topk);
  r.counts_dev = k::device_array<int64_t>(experts);
  k::router_topk_forward(s, logits.data(), (const float*)nullptr, r.idx.data(),
                         r.gate.data(), (float*)nullptr, tokens, experts, topk,
                         1.0f);
  r.rows = k::permute_plan(s, r.idx.data(), tokens, experts, topk,
                           r.slot.data(), r.counts_dev.data());
  r.counts.resize(experts);
  k::copy_to_host(s, r.counts.data(), r.counts_dev.data(), 8 * experts);
  return r;
}

void bench_grouped_gemm(const sizes& z, tutti::bench::table& t,
                        std::mt19937_64& rng) {
  for (const auto prec : {k::gemm_precision::fp32, k::gemm_precision::bf16}) {
    k::device_stream ds(prec);
    const k::stream s = ds.get();
    const int64_t E = z.experts, kk = z.gemm_dim, n = z.gemm_ffn;
    routing r = route(s, z.gemm_tokens, E, z.topk, rng);
    auto x = random_device(s, size_t(r.rows * kk), 1.0, rng);
    auto w = random_device(s, size_t(E * n * kk), 0.02, rng);
    k::device_array<float> y(r.rows * n);
    const double flop = 2.0 * double(r.rows) * double(kk) * double(n);
    const double grouped = time_ms(s, z.iters, [&] {
      k::grouped_linear_forward(s, x.data(), w.data(), r.counts.data(), E,
                                y.data(), kk, n);
    });
    const double one = time_ms(s, z.iters, [&] {
      k::linear_forward(s, x.data(), w.data(), y.data(), r.rows, kk, n);
    });
    const char* p = prec == k::gemm_precision::fp32 ? "fp32"
                                                    : "bf16 in, fp32 acc";
    char name[160];
    std::snprintf(
      name, sizeof(name),
      "grouped GEMM %s, %lld experts, %lld rows x %lld -> %lld (TFLOP/s)", p,
      (long long)E, (long long)r.rows, (long long)kk, (long long)n);
    t.add(name, fmt("%.1f", flop / grouped * 1e-9),
          "one cuBLAS GEMM, same FLOPs", fmt("%.1f", flop / one * 1e-9),
          one / grouped);
  }
}

void bench_permute(const sizes& z, tutti::bench::table& t,
                   std::mt19937_64& rng) {
  k::device_stream ds;
  const k::stream s = ds.get();
  const int64_t T = z.gemm_tokens, d = z.gemm_dim, kk = z.topk;
  routing r = route(s, T, z.experts, kk, rng);
  auto x = random_device(s, size_t(T * d), 1.0, rng);
  k::device_array<float> rows(r.rows * d), out(T * d);
  // permute: reads rows * d, writes rows * d.
  const double pbytes = 2.0 * double(r.rows * d) * 4;
  const double perm = time_ms(s, z.iters, [&] {
    k::permute_rows(s, x.data(), r.slot.data(), rows.data(), r.rows, kk, d);
  });
  // unpermute-combine: reads rows * d, writes T * d.
  const double ubytes = double(r.rows * d + T * d) * 4;
  const double unperm = time_ms(s, z.iters, [&] {
    k::unpermute_combine(s, rows.data(), r.slot.data(), r.gate.data(),
                         out.data(), r.rows, T, kk, d);
  });
  // Anchors: a device-to-device copy moving the same bytes (read + write).
  k::device_array<char> a(size_t(pbytes / 2)), b(size_t(pbytes / 2));
  const double copy_p = time_ms(s, z.iters, [&] {
    k::copy_device_to_device(s, b.data(), a.data(), a.bytes());
  });
  const size_t ucopy = size_t(ubytes / 2);
  const double copy_u = time_ms(s, z.iters, [&] {
    k::copy_device_to_device(s, b.data(), a.data(), ucopy);
  });
  char name[160];
  std::snprintf(name, sizeof(name), "permute_rows %lld rows x %lld fp32 (GB/s)",
                (long long)r.rows, (long long)d);
  t.add(name, fmt("%.0f", pbytes / perm * 1e-6), "cudaMemcpy D2D, same bytes",
        fmt("%.0f", pbytes / copy_p * 1e-6), copy_p / perm);
  std::snprintf(name, sizeof(name),
                "unpermute_combine -> %lld tokens x %lld (GB/s)", (long long)T,
                (long long)d);
  t.add(name, fmt("%.0f", ubytes / unperm * 1e-6), "cudaMemcpy D2D, same bytes",
        fmt("%.0f", 2.0 * double(ucopy) / copy_u * 1e-6), copy_u / unperm);
}

// The layer of bench/moe_layer_torch.py: router, top-k, permute, SwiGLU
// experts (w1, w3, w2), combine; then the whole backward.
double bench_moe_layer(const sizes& z, std::mt19937_64& rng) {
  k::device_stream ds;
  const k::stream s = ds.get();
  const int64_t T = z.tokens, d = z.dim, F = z.ffn, E = z.experts, kk = z.topk;
  auto x = random_device(s, T * d, 1.0, rng),
       dout = random_device(s, T * d, 1.0, rng);
  auto wr = random_device(s, E * d, 0.03, rng),
       w1 = random_device(s, E * F * d, 0.03, rng),
       w3 = random_device(s, E * F * d, 0.03, rng),
       w2 = random_device(s, E * d * F, 0.02, rng);
  k::device_array<float> dwr(E * d), dw1(E * F * d), dw3(E * F * d),
    dw2(E * d * F);
  k::device_array<float> logits(T * E), gate(T * kk), dgate(T * kk),
    dlogits(T * E);
  k::device_array<int32_t> idx(T * kk), slot(T * kk);
  k::device_array<int64_t> counts_dev(E);
  std::vector<int64_t> counts(E);
  const int64_t R = T * kk; // rows upper bound (dropless)
  k::device_array<float> xp(R * d), g(R * F), u(R * F), h(R * F), y(R * d),
    out(T * d);
  k::device_array<float> dy(R * d), dh(R * F), dg(R * F), du(R * F), dxp(R * d),
    dxp2(R * d), dx(T * d), dx2(T * d);
  return time_ms(s, 1, [&] {
    k::linear_forward(s, x.data(), wr.data(), logits.data(), T, d, E);
    k::router_topk_forward(s, logits.data(), (const float*)nullptr, idx.data(),
                           gate.data(), (float*)nullptr, T, E, kk, 1.0f);
    const int64_t rows = k::permute_plan(s, idx.data(), T, E, kk, slot.data(),
                                         counts_dev.data());
    k::copy_to_host(s, counts.data(), counts_dev.data(), 8 * E);
    k::permute_rows(s, x.data(), slot.data(), xp.data(), rows, kk, d);
    k::grouped_linear_forward(s, xp.data(), w1.data(), counts.data(), E,
                              g.data(), d, F);
    k::grouped_linear_forward(s, xp.data(), w3.data(), counts.data(), E,
                              u.data(), d, F);
    k::swiglu_forward(s, g.data(), u.data(), h.data(), rows * F);
    k::grouped_linear_forward(s, h.data(), w2.data(), counts.data(), E,
                              y.data(), F, d);
    k::unpermute_combine(s, y.data(), slot.data(), gate.data(), out.data(),
                         rows, T, kk, d);
    // backward
    k::unpermute_combine_backward(s, dout.data(), y.data(), slot.data(),
                                  gate.data(), dy.data(), dgate.data(), rows, T,
                                  kk, d);
    k::grouped_linear_backward(s, h.data(), w2.data(), dy.data(), counts.data(),
                               E, dh.data(), dw2.data(), F, d);
    k::swiglu_backward(s, g.data(), u.data(), dh.data(), dg.data(), du.data(),
                       rows * F);
    k::grouped_linear_backward(s, xp.data(), w1.data(), dg.data(),
                               counts.data(), E, dxp.data(), dw1.data(), d, F);
    k::grouped_linear_backward(s, xp.data(), w3.data(), du.data(),
                               counts.data(), E, dxp2.data(), dw3.data(), d, F);
    k::axpy(s, 1.0f, dxp2.data(), dxp.data(), rows * d);
    k::fill_zero(s, dx.data(), T * d);
    k::permute_rows_backward(s, dxp.data(), slot.data(), dx.data(), rows, kk,
                             d);
    k::router_topk_backward(s, idx.data(), gate.data(), dgate.data(),
                            dlogits.data(), T, E, kk, 1.0f);
    k::linear_backward(s, x.data(), wr.data(), dlogits.data(), dx2.data(),
                       dwr.data(), T, d, E);
    k::axpy(s, 1.0f, dx2.data(), dx.data(), T * d);
  });
}

bool flag(int& i, int argc, char** argv, const char* name, double& v) {
  if (std::strcmp(argv[i], name) != 0 || i + 1 >= argc)
    return false;
  v = std::atof(argv[++i]);
  return true;
}

} // namespace

int main(int argc, char** argv) {
  sizes z;
  for (int i = 1; i < argc; ++i) {
    double v = 0;
    if (flag(i, argc, argv, "--torch-moe-ms", z.torch_moe_ms))
      continue;
    if (flag(i, argc, argv, "--tokens", v)) {
      z.tokens = int64_t(v);
      continue;
    }
    if (flag(i, argc, argv, "--dim", v)) {
      z.dim = int64_t(v);
      continue;
    }
    if (flag(i, argc, argv, "--ffn", v)) {
      z.ffn = int64_t(v);
      continue;
    }
    if (flag(i, argc, argv, "--experts", v)) {
      z.experts = int64_t(v);
      continue;
    }
    if (flag(i, argc, argv, "--topk", v)) {
      z.topk = int64_t(v);
      continue;
    }
    if (flag(i, argc, argv, "--iters", v)) {
      z.iters = int(v);
      continue;
    }
    std::fprintf(stderr, "gpu_bench: unknown argument %s\n", argv[i]);
    return 2;
  }
  if (auto device = k::cuda_device_available(); !device) {
    std::printf("SKIPPED gpu_bench: %s\n", device.message().c_str());
    return 77;
  }
  std::printf("device: %s\n", k::cuda_device_description().c_str());
  std::mt19937_64 rng(7);
  tutti::bench::table t;
  bench_grouped_gemm(z, t, rng);
  bench_permute(z, t, rng);
  const double ms = bench_moe_layer(z, rng);
  char name[200];
  std::snprintf(name, sizeof(name),
                "MoE layer fwd+bwd fp32, %lld tokens, d %lld, ffn %lld, %lld "
                "experts, top-%lld (ms)",
                (long long)z.tokens, (long long)z.dim, (long long)z.ffn,
                (long long)z.experts, (long long)z.topk);
  if (z.torch_moe_ms > 0)
    t.add(name, fmt("%.2f", ms), "PyTorch, same layer (moe_layer_torch.py)",
          fmt("%.2f", z.torch_moe_ms), z.torch_moe_ms / ms);
  else
    t.add(name, fmt("%.2f", ms), "PyTorch: not measured (no --torch-moe-ms)",
          "-", 0.0);
  t.print();
  return 0;
}
