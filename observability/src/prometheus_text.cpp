#include "tutti/observability/prometheus_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>

namespace tutti::observability {
namespace {

bool is_letter_or_underscore(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size()
         && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// HELP text escapes only backslash and newline (quotes stay as they are).
std::string escape_help(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// "{a="x",b="y"}", or "" for no labels. Labels keep the caller's order.
std::string render_labels(const std::string& metric, const label_list& labels) {
  if (labels.empty())
    return {};
  std::set<std::string> seen;
  std::string out = "{";
  for (const auto& [label, value] : labels) {
    if (!is_valid_label_name(label))
      throw std::invalid_argument("prometheus_text: invalid label name '"
                                  + label + "' on metric '" + metric + "'");
    if (!seen.insert(label).second)
      throw std::invalid_argument("prometheus_text: label '" + label
                                  + "' repeated on metric '" + metric + "'");
    if (out.size() > 1)
      out += ',';
    out += label;
    out += "=\"";
    out += escape_label_value(value);
    out += '"';
  }
  out += '}';
  return out;
}

} // namespace

bool is_valid_metric_name(const std::string& name) {
  if (name.empty())
    return false;
  if (!is_letter_or_underscore(name[0]) && name[0] != ':')
    return false;
  for (char c : name)
    if (!is_letter_or_underscore(c) && !is_digit(c) && c != ':')
      return false;
  return true;
}

bool is_valid_label_name(const std::string& name) {
  if (name.empty() || !is_letter_or_underscore(name[0]))
    return false;
  for (char c : name)
    if (!is_letter_or_underscore(c) && !is_digit(c))
      return false;
  return true;
}

std::string format_sample_value(double value) {
  if (std::isnan(value))
    return "NaN";
  if (std::isinf(value))
    return value > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g",
                value); // 17 digits round-trip any double
  return buf;
}

void prometheus_text::declare(const std::string& name, const std::string& type,
                              const std::string& help) {
  if (!is_valid_metric_name(name))
    throw std::invalid_argument("prometheus_text: invalid metric name '" + name
                                + "'");
  auto it = index_by_name_.find(name);
  if (it != index_by_name_.end()) {
    const metric_family& existing = families_[it->second];
    if (existing.type != type || existing.help != help)
      throw std::invalid_argument(
        "prometheus_text: metric '" + name
        + "' declared twice with different type or help");
    return;
  }
  index_by_name_.emplace(name, families_.size());
  families_.push_back(metric_family{name, type, help, {}, {}});
}

void prometheus_text::family(const std::string& name, const std::string& type,
                             const std::string& help) {
  if (type != "gauge" && type != "counter")
    throw std::invalid_argument("prometheus_text: metric '" + name
                                + "' has unsupported type '" + type
                                + "' (gauge or counter; histograms through "
                                  "histogram_family)");
  if (type == "counter" && !ends_with(name, "_total"))
    throw std::invalid_argument("prometheus_text: counter '" + name
                                + "' must end in _total");
  declare(name, type, help);
}

void prometheus_text::histogram_family(const std::string& name,
                                       const std::string& help) {
  declare(name, "histogram", help);
}

prometheus_text::metric_family& prometheus_text::series(
  const std::string& name, bool histogram, const label_list& labels) {
  auto it = index_by_name_.find(name);
  if (it == index_by_name_.end())
    throw std::invalid_argument(
      "prometheus_text: sample for undeclared metric '" + name + "'");
  metric_family& fam = families_[it->second];
  if ((fam.type == "histogram") != histogram)
    throw std::invalid_argument(
      "prometheus_text: metric '" + name + "' is a " + fam.type
      + (histogram ? ": sample() it" : ": use histogram_sample()"));
  // The same label set in another order is the same series.
  label_list sorted_labels = labels;
  std::sort(sorted_labels.begin(), sorted_labels.end());
  if (!fam.label_sets.insert(render_labels(name, sorted_labels)).second)
    throw std::invalid_argument("prometheus_text: duplicate sample " + name
                                + render_labels(name, labels));
  return fam;
}

void prometheus_text::metric(const std::string& name, const std::string& type,
                             const std::string& help, const label_list& labels,
                             double value) {
  family(name, type, help);
  sample(name, labels, value);
}

void prometheus_text::sample(const std::string& name, const label_list& labels,
                             double value) {
  auto& fam = series(name, false, labels);
  fam.sample_lines.push_back(name + render_labels(name, labels) + ' '
                             + format_sample_value(value) + '\n');
}

void prometheus_text::histogram_sample(const std::string& name,
                                       const label_list& labels,
                                       const histogram_counts& counts) {
  for (const auto& label : labels)
    if (label.first == "le")
      throw std::invalid_argument("prometheus_text: histogram '" + name
                                  + "' cannot take a label named le");
  const auto& bounds = counts.upper_bounds;
  if (counts.cumulative.size() != bounds.size() + 1
      || !std::is_sorted(counts.cumulative.begin(), counts.cumulative.end())
      || std::adjacent_find(bounds.begin(), bounds.end(),
                            std::greater_equal<double>())
           != bounds.end())
    throw std::invalid_argument("prometheus_text: histogram '" + name
                                + "' needs ascending bounds and one "
                                  "cumulative count per bound plus +Inf");
  auto& fam = series(name, true, labels);
  for (size_t i = 0; i <= bounds.size(); ++i) {
    auto with_le = labels;
    with_le.emplace_back(
      "le", i < bounds.size() ? format_sample_value(bounds[i]) : "+Inf");
    fam.sample_lines.push_back(name + "_bucket" + render_labels(name, with_le)
                               + ' ' + std::to_string(counts.cumulative[i])
                               + '\n');
  }
  const auto label_part = render_labels(name, labels);
  fam.sample_lines.push_back(name + "_sum" + label_part + ' '
                             + format_sample_value(counts.sum) + '\n');
  // Counts as integers: exact past 2^53, where a double is not.
  fam.sample_lines.push_back(name + "_count" + label_part + ' '
                             + std::to_string(counts.count()) + '\n');
}

std::string prometheus_text::str() const {
  std::string out;
  for (const metric_family& fam : families_) {
    out += "# HELP " + fam.name + ' ' + escape_help(fam.help) + '\n';
    out += "# TYPE " + fam.name + ' ' + fam.type + '\n';
    for (const std::string& line : fam.sample_lines)
      out += line;
  }
  return out;
}

} // namespace tutti::observability
