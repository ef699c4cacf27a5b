#include "tutti/observability/prometheus_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

void prometheus_text::family(const std::string& name, const std::string& type,
                             const std::string& help) {
  if (!is_valid_metric_name(name))
    throw std::invalid_argument("prometheus_text: invalid metric name '" + name
                                + "'");
  if (type != "gauge" && type != "counter")
    throw std::invalid_argument("prometheus_text: metric '" + name
                                + "' has unsupported type '" + type
                                + "' (gauge or counter)");
  if (type == "counter" && !ends_with(name, "_total"))
    throw std::invalid_argument("prometheus_text: counter '" + name
                                + "' must end in _total");
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

void prometheus_text::sample(const std::string& name, const label_list& labels,
                             double value) {
  auto it = index_by_name_.find(name);
  if (it == index_by_name_.end())
    throw std::invalid_argument(
      "prometheus_text: sample for undeclared metric '" + name + "'");
  metric_family& fam = families_[it->second];
  std::string label_part = render_labels(name, labels);
  // The same label set in another order is the same series.
  label_list sorted_labels = labels;
  std::sort(sorted_labels.begin(), sorted_labels.end());
  if (!fam.label_sets.insert(render_labels(name, sorted_labels)).second)
    throw std::invalid_argument("prometheus_text: duplicate sample " + name
                                + label_part);
  fam.sample_lines.push_back(name + label_part + ' '
                             + format_sample_value(value) + '\n');
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
