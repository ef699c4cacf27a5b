// The single-core sgemm anchor of bench_vs_torch.sh: what one core's BLAS
// does on a GEMM of the medium model's shape, through the kernels' own
// linear_forward (OpenBLAS, single-threaded, the core the kernels chose).
// Prints one line: sgemm_gflops=<best of 5 samples> core=<OpenBLAS core>
//
// Usage: bench_sgemm [M K N]   (default 2048 256 512: a step's tokens
// through an expert-sized weight)

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_util.hpp"
#include "tutti/kernels/blas_core.hpp"
#include "tutti/kernels/ops.hpp"

int main(int argc, char** argv) {
  namespace k = tutti::kernels;
  const long m = argc > 3 ? std::atol(argv[1]) : 2048;
  const long kk = argc > 3 ? std::atol(argv[2]) : 256;
  const long n = argc > 3 ? std::atol(argv[3]) : 512;
  if (m <= 0 || kk <= 0 || n <= 0) {
    std::fprintf(stderr, "bench_sgemm: sizes must be positive\n");
    return 2;
  }
  k::use_single_threaded_blas();
  const auto s = k::cpu_stream();
  std::vector<float> x(m * kk, 0.01f), w(n * kk, 0.02f), y(m * n);
  const int reps = 20;
  double best = 0;
  for (int sample = 0; sample < 6; ++sample) {
    const double t0 = tutti::bench::now_s();
    for (int r = 0; r < reps; ++r)
      k::linear_forward(s, x.data(), w.data(), y.data(), m, kk, n);
    const double gflops = 2.0 * m * kk * n * reps
                          / (tutti::bench::now_s() - t0) / 1e9;
    if (sample > 0 && gflops > best) // the first warms caches and pages
      best = gflops;
  }
  std::printf("sgemm_gflops=%.1f core=%s shape=%ldx%ldx%ld\n", best,
              k::blas_core_name().c_str(), m, kk, n);
  return 0;
}
