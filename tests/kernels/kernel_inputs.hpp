#pragma once
// Shared by the kernel tests: random inputs drawn in double, and the same
// values in the precision an op runs in.

#include <random>
#include <vector>

namespace tutti::testing {

// `n` normal values of standard deviation `scale`.
inline std::vector<double> randn(size_t n, std::mt19937_64& rng,
                                 double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

// The same, rounded to float, so fp32 and fp64 runs see the same inputs.
inline std::vector<double> randn_in_float(size_t n, std::mt19937_64& rng,
                                          double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (auto& x : v)
    x = double(float(d(rng)));
  return v;
}

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

} // namespace tutti::testing
