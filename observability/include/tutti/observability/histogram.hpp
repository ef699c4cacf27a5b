#pragma once
// A Prometheus histogram: observations counted into buckets with upper
// bounds, plus their sum. prometheus_text writes it as the family's
// _bucket, _sum and _count series. Not thread-safe: its owner locks.

#include <cstdint>
#include <vector>

namespace tutti::observability {

// A histogram's numbers as the exposition format wants them.
struct histogram_counts {
  std::vector<double> upper_bounds; // ascending; the +Inf bucket is implied
  // Observations <= each bound (cumulative), then all of them (+Inf).
  std::vector<uint64_t> cumulative;
  double sum = 0.0;
  uint64_t count() const { return cumulative.empty() ? 0 : cumulative.back(); }
};

class histogram {
public:
  // `upper_bounds` ascending, without +Inf.
  explicit histogram(std::vector<double> upper_bounds);
  void observe(double v);
  uint64_t count() const { return count_; }
  histogram_counts counts() const;

private:
  std::vector<double> bounds_;
  std::vector<uint64_t> per_bucket_; // not cumulative; the last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

} // namespace tutti::observability
