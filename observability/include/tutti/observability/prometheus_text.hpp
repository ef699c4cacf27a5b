#pragma once
// Builder for the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Declare each family once with family(), then add samples in any order:
// str() groups them by family (the format requires a family's samples to be
// contiguous), families in order of first declaration, each preceded by its
// HELP and TYPE lines. Bad names are programming errors, so they throw
// std::invalid_argument naming the offending name.

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tutti::observability {

using label_list = std::vector<std::pair<std::string, std::string>>;

class prometheus_text {
public:
  // type is "gauge" or "counter"; a counter's name must end in "_total".
  // Declaring the same family again with the same type and help is a no-op;
  // with a different type or help it throws.
  void family(const std::string& name, const std::string& type,
              const std::string& help);

  // Adds one sample to a declared family. Throws for an undeclared family,
  // an invalid or repeated label name, or a label set already sampled.
  void sample(const std::string& name, const label_list& labels, double value);

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
  std::vector<metric_family> families_;
  std::map<std::string, std::size_t> index_by_name_;
};

// Helpers exposed for tests and for callers that build lines themselves.
bool is_valid_metric_name(const std::string& name); // [a-zA-Z_:][a-zA-Z0-9_:]*
bool is_valid_label_name(const std::string& name);  // [a-zA-Z_][a-zA-Z0-9_]*
std::string format_sample_value(double value);      // %.17g, +Inf, -Inf, NaN

} // namespace tutti::observability
