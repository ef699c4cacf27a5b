// Expert FFN (grouped SwiGLU GEMMs, forward + backward) over all local
// experts with uneven rows per expert, in GFLOP/s, against ONE OpenBLAS
// sgemm of the same FLOPs: what the grouped layout costs against the best
// the BLAS does on one big product. Both on one BLAS thread, as in tutti.

#include <cblas.h>

#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/expert_ffn.hpp"

namespace k = tutti::kernels;
using namespace tutti::bench;

namespace {

struct ffn_case {
  std::string name;
  int64_t hidden, intermediate;
  std::vector<int64_t> rows; // per local expert
};

std::vector<float> randn(size_t n, float std, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(gen);
  return v;
}

// Rows per expert as shares of `total`; the last expert takes the rounding.
std::vector<int64_t> split(int64_t total, std::vector<double> shares) {
  std::vector<int64_t> rows;
  int64_t used = 0;
  for (size_t i = 0; i + 1 < shares.size(); ++i) {
    rows.push_back(static_cast<int64_t>(shares[i] * total));
    used += rows.back();
  }
  rows.push_back(total - used);
  return rows;
}

void run_case(const ffn_case& c, table& out) {
  const int64_t E = static_cast<int64_t>(c.rows.size()), D = c.hidden,
                F = c.intermediate;
  const int64_t M = std::accumulate(c.rows.begin(), c.rows.end(), int64_t{0});
  // Forward: w1, w3 ([M,D]x[D,F]) and w2 ([M,F]x[F,D]); backward: dx and dw
  // of each: 9 products of 2*M*D*F each (SwiGLU and axpy are not counted).
  const double flops = 18.0 * M * D * F;

  auto w1 = randn(E * F * D, 0.02f, 1), w3 = randn(E * F * D, 0.02f, 2),
       w2 = randn(E * D * F, 0.02f, 3);
  std::vector<float> dw1(w1.size()), dw3(w3.size()), dw2(w2.size());
  tutti::train::expert_block blk{w1.data(),  w3.data(),  w2.data(),
                                 dw1.data(), dw3.data(), dw2.data()};
  auto x = randn(M * D, 1.0f, 4), dy = randn(M * D, 1.0f, 5);
  std::vector<float> y(M * D), dx(M * D);
  tutti::train::expert_ffn ffn(1, E, D, F);
  const auto s = k::cpu_stream();
  auto grouped = [&] {
    ffn.forward(s, 0, blk, x.data(), c.rows.data(), y.data());
    ffn.backward(s, 0, blk, dy.data(), dx.data());
  };

  // The anchor: C[M, 3F] = A[M, 3D] * B[3F, 3D]^T has 2*M*3F*3D = 18*M*D*F
  // FLOPs, the same total as the grouped work, in one call.
  auto a = randn(M * 3 * D, 1.0f, 6), b = randn(3 * F * 3 * D, 0.02f, 7);
  std::vector<float> cm(M * 3 * F);
  auto one_gemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, 3 * F, 3 * D, 1.0f,
                a.data(), 3 * D, b.data(), 3 * D, 0.0f, cm.data(), 3 * F);
  };

  // Enough calls per sample to make it ~50 ms, so timer noise is small.
  grouped();
  one_gemm();
  double t0 = now_s();
  grouped();
  const int inner = std::max(1, static_cast<int>(0.05 / (now_s() - t0)));
  auto sample = [&](auto& fn) {
    double start = now_s();
    for (int i = 0; i < inner; ++i)
      fn();
    return (now_s() - start) / inner;
  };

  // Alternate which goes first so drift on the shared machine hits both.
  std::vector<double> tg, ta;
  for (int rep = 0; rep < 15; ++rep) {
    if (rep % 2) {
      tg.push_back(sample(grouped));
      ta.push_back(sample(one_gemm));
    } else {
      ta.push_back(sample(one_gemm));
      tg.push_back(sample(grouped));
    }
  }
  const double g = flops / median(tg) / 1e9, an = flops / median(ta) / 1e9;
  char anchor[96];
  std::snprintf(anchor, sizeof(anchor), "one sgemm %lldx%lldx%lld",
                static_cast<long long>(M), static_cast<long long>(3 * F),
                static_cast<long long>(3 * D));
  out.add(c.name, fmt("%.1f GFLOP/s", g), anchor, fmt("%.1f GFLOP/s", an),
          g / an);
}

} // namespace

int main() {
  k::use_single_threaded_blas();
  std::vector<ffn_case> cases = {
    {"4 experts 40/30/20/10% of 4096 rows, D256 F512", 256, 512,
     split(4096, {0.4, 0.3, 0.2, 0.1})},
    {"8 experts skewed 50/20/10/8/6/3/2/1% of 4096 rows, D256 F512", 256, 512,
     split(4096, {0.5, 0.2, 0.1, 0.08, 0.06, 0.03, 0.02, 0.01})},
    // The quickstart model: 2048 rows per step reach each of 2 ranks'
    // 2 experts (32 seqs x 64 tokens x top-2 / 2 ranks), one layer.
    {"quickstart shard: 2 experts 60/40% of 2048 rows, D64 F128", 64, 128,
     split(2048, {0.6, 0.4})},
    {"quickstart world 1: 4 experts 30/27/23/20% of 4096 rows, D64 F128", 64,
     128, split(4096, {0.3, 0.27, 0.23, 0.2})},
  };
  std::printf("expert FFN forward+backward, 1 BLAS thread, median of 15\n\n");
  table t;
  for (const auto& c : cases)
    run_case(c, t);
  t.print();
}
