#pragma once
// Shared by the gradient checks: the loss <G, y> and the comparison of an
// analytic gradient with central finite differences, in double.

#include <catch2/catch.hpp>

#include <vector>

#include "kernel_inputs.hpp"

namespace tutti::testing {

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

// Central differences of loss() w.r.t. every element of x (x is perturbed
// in place and restored exactly).
template <class F>
std::vector<double> numeric_grad(std::vector<double>& x, F&& loss,
                                 double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    g[i] = (lp - lm) / (2.0 * h);
  }
  return g;
}

// ||a - n|| / ||n||; when the true gradient is all zero, the absolute norm.
template <class F>
void check_grad(const char* what, const std::vector<double>& analytic,
                std::vector<double>& x, F&& loss) {
  REQUIRE(analytic.size() == x.size());
  const auto num = numeric_grad(x, loss);
  const double err = rel_err(analytic, num);
  INFO(what << ": relative error " << err);
  CHECK(err <= 1e-6);
}

} // namespace tutti::testing
