#include "tutti/dashboard/prometheus_json.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

namespace tutti::dashboard {

namespace {

bool name_char(char c, bool first) {
  return c == '_' || c == ':' || (c >= 'a' && c <= 'z')
         || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9');
}

// Reads `{a="x",b="y"}` from `at`; false on a malformed set.
bool read_labels(const std::string& line, size_t& at,
                 std::vector<std::pair<std::string, std::string>>& out) {
  ++at; // '{'
  while (at < line.size() && line[at] != '}') {
    size_t start = at;
    while (at < line.size() && name_char(line[at], at == start))
      ++at;
    if (at == start || at + 1 >= line.size() || line[at] != '='
        || line[at + 1] != '"')
      return false;
    std::string name = line.substr(start, at - start), value;
    for (at += 2; at < line.size() && line[at] != '"'; ++at) {
      if (line[at] != '\\') {
        value += line[at];
        continue;
      }
      if (++at == line.size())
        return false;
      value += line[at] == 'n' ? '\n' : line[at];
    }
    if (at == line.size())
      return false;
    out.emplace_back(std::move(name), std::move(value));
    ++at; // closing quote
    if (at < line.size() && line[at] == ',')
      ++at;
  }
  if (at == line.size())
    return false;
  ++at; // '}'
  return true;
}

bool read_value(const std::string& text, double& value) {
  if (text == "+Inf" || text == "Inf") {
    value = INFINITY;
    return true;
  }
  if (text == "-Inf") {
    value = -INFINITY;
    return true;
  }
  if (text == "NaN") {
    value = NAN;
    return true;
  }
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

} // namespace

expected<std::vector<sample>> parse_prometheus(const std::string& text) {
  std::vector<sample> out;
  std::istringstream in(text);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#')
      continue;
    auto bad = [&] {
      return status::error("metrics text line " + std::to_string(number)
                           + " is not a sample: " + line.substr(0, 80));
    };
    sample s;
    size_t at = 0;
    while (at < line.size() && name_char(line[at], at == 0))
      ++at;
    if (at == 0)
      return bad();
    s.name = line.substr(0, at);
    if (at < line.size() && line[at] == '{' && !read_labels(line, at, s.labels))
      return bad();
    if (at >= line.size() || line[at] != ' ')
      return bad();
    auto rest = line.substr(at + 1);
    if (auto space = rest.find(' '); space != std::string::npos)
      rest.resize(space); // a timestamp follows
    if (!read_value(rest, s.value))
      return bad();
    out.push_back(std::move(s));
  }
  return out;
}

std::string samples_json(const std::vector<sample>& samples, int64_t time_ms) {
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& s : samples) {
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [k, v] : s.labels)
      labels[k] = v;
    nlohmann::json value = nullptr;
    if (std::isfinite(s.value))
      value = s.value;
    else if (std::isinf(s.value))
      value = s.value > 0 ? "+Inf" : "-Inf";
    metrics[s.name].push_back({std::move(labels), std::move(value)});
  }
  return nlohmann::json{{"time_ms", time_ms}, {"metrics", std::move(metrics)}}
    .dump();
}

} // namespace tutti::dashboard
