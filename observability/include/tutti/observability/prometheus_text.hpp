#pragma once
// tutti's one writer of the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/): every
// /metrics text (daemons, the serving front, the gateway) is built here.
//
// Declare each family once (family() for gauges and counters,
// histogram_family() for histograms), then add samples in any order:
// str() groups them by family (the format requires a family's samples to
// be contiguous), families in order of first declaration, each preceded by
// its HELP and TYPE lines. Label values are escaped as the format says
// (backslash, double quote and newline as \\, \" and \n). Bad names are
// programming errors, so they throw std::invalid_argument naming the
// offending name.

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tutti/observability/histogram.hpp"

namespace tutti::observability {

using label_list = std::vector<std::pair<std::string, std::string>>;

class prometheus_text {
public:
  // type is "gauge" or "counter"; a counter's name must end in "_total".
  // Declaring the same family again with the same type and help is a no-op;
  // with a different type or help it throws.
  void family(const std::string& name, const std::string& type,
              const std::string& help);
  // A histogram family: its samples come from histogram_sample().
  void histogram_family(const std::string& name, const std::string& help);

  // A gauge or counter family with its one sample: family() and sample().
  void metric(const std::string& name, const std::string& type,
              const std::string& help, const label_list& labels, double value);

  // Adds one sample to a declared gauge or counter. Throws for an
  // undeclared family, an invalid or repeated label name, or a label set
  // already sampled.
  void sample(const std::string& name, const label_list& labels, double value);
  // Adds one histogram's series: name_bucket{labels,le="bound"} for each
  // bound and +Inf, name_sum{labels} and name_count{labels}. Throws as
  // sample() does, and for a label named "le" or counts that do not fit
  // the bounds.
  void histogram_sample(const std::string& name, const label_list& labels,
                        const histogram_counts& counts);

  // The exposition text; every line, the last included, ends with '\n'.
  // Empty when no family was declared.
  std::string str() const;

private:
  struct metric_family {
    std::string name;
    std::string type;
    std::string help;
    std::vector<std::string> sample_lines;
    std::set<std::string>
      label_sets; // sorted, rendered label sets, to reject duplicates
  };
  void declare(const std::string& name, const std::string& type,
               const std::string& help);
  // The declared family `name` (a histogram or not, as asked), with
  // `labels` recorded as sampled; throws when they were already.
  metric_family& series(const std::string& name, bool histogram,
                        const label_list& labels);

  std::vector<metric_family> families_;
  std::map<std::string, std::size_t> index_by_name_;
};

// Helpers exposed for tests and for callers that build lines themselves.
bool is_valid_metric_name(const std::string& name); // [a-zA-Z_:][a-zA-Z0-9_:]*
bool is_valid_label_name(const std::string& name);  // [a-zA-Z_][a-zA-Z0-9_]*
std::string format_sample_value(double value);      // %.17g, +Inf, -Inf, NaN

} // namespace tutti::observability
