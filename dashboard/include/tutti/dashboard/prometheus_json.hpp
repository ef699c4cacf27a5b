#pragma once
// Prometheus' text format (0.0.4) read back into samples, and those as the
// JSON the dashboard polls: {"time_ms": T, "metrics": {NAME: [[{LABEL:
// VALUE...}, VALUE], ...]}} with NaN as null and infinities as "+Inf"
// and "-Inf". Histograms
// come as their _bucket, _sum and _count samples.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::dashboard {

struct sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

// Every sample of `text`, in order; comment lines are skipped. A line that
// is not a sample fails, naming its line number.
expected<std::vector<sample>> parse_prometheus(const std::string& text);

std::string samples_json(const std::vector<sample>& samples, int64_t time_ms);

} // namespace tutti::dashboard
