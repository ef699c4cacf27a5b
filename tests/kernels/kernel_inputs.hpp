#pragma once
// Shared by the kernel tests: random inputs drawn in double, the same
// values in the precision an op runs in, and the error measure outputs are
// checked by.

#include <cmath>
#include <cstdint>
#include <cstring>
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

// Back to double: widening float is exact, so bit equality survives it.
template <class T>
std::vector<double> wide(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Normwise relative error ||a - ref|| / ||ref|| (||a - ref|| when ref is 0).
inline double rel_err(const std::vector<double>& a,
                      const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// `n` float values of N(0, sd^2) from seed `seed`.
inline std::vector<float> normal_floats(int64_t n, unsigned seed, float sd) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v)
    x = normal(gen);
  return v;
}

// Bit for bit, where == would take -0 for 0 and never a NaN for itself.
inline bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

} // namespace tutti::testing
