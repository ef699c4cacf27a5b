#pragma once
// Shared by the benchmarks: a clock, medians and the one table format they
// all print: every figure next to an anchor measured in the
// same run, because these machines are noisy and only ratios travel.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace tutti::bench {

inline double now_s() {
  return std::chrono::duration<double>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

inline double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline std::string fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

// Markdown, so a run's output pastes straight into RESULTS.md.
class table {
public:
  void add(std::string figure, std::string value, std::string anchor,
           std::string anchor_value, double ratio) {
    rows_.push_back({std::move(figure), std::move(value), std::move(anchor),
                     std::move(anchor_value), fmt("%.3f", ratio)});
  }

  void print() const {
    std::printf("| figure | value | anchor | anchor value | ratio |\n"
                "|---|---:|---|---:|---:|\n");
    for (const auto& r : rows_)
      std::printf("| %s | %s | %s | %s | %s |\n", r[0].c_str(), r[1].c_str(),
                  r[2].c_str(), r[3].c_str(), r[4].c_str());
    std::fflush(stdout);
  }

private:
  std::vector<std::vector<std::string>> rows_;
};

} // namespace tutti::bench
