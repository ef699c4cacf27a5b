#include "tutti/observability/histogram.hpp"

#include <cstddef>
#include <utility>

namespace tutti::observability {

histogram::histogram(std::vector<double> upper_bounds)
  : bounds_(std::move(upper_bounds)), per_bucket_(bounds_.size() + 1, 0) {}

void histogram::observe(double v) {
  std::size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i])
    ++i;
  ++per_bucket_[i];
  sum_ += v;
  ++count_;
}

histogram_counts histogram::counts() const {
  histogram_counts out;
  out.upper_bounds = bounds_;
  out.sum = sum_;
  uint64_t running = 0;
  for (uint64_t n : per_bucket_)
    out.cumulative.push_back(running += n);
  return out;
}

} // namespace tutti::observability
