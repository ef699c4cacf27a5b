#include "tutti/serve/served_routing_stats.hpp"
#include "tutti/base/whole_number.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

namespace tutti::serve {

namespace {

// The value of label `name` in a sample's {…}; -1 when absent or not a
// whole number.
int64_t label_number(const std::string& labels, const std::string& name) {
  const auto at = labels.find(name + "=\"");
  if (at == std::string::npos)
    return -1;
  const auto from = at + name.size() + 2;
  const auto to = labels.find('"', from);
  return whole_number(labels.substr(from, to - from)).value_or(-1);
}

} // namespace

expected<placement::routing_stats> routing_stats_from_metrics(
  const std::string& text) {
  static const std::string metric = "tutti_serve_expert_tokens_total{";
  std::map<std::pair<int64_t, int64_t>, int64_t> counts;
  int64_t layers = 0, experts = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(metric, 0) != 0)
      continue;
    const auto close = line.find('}');
    if (close == std::string::npos)
      return status::error("a malformed sample: " + line);
    const auto labels = line.substr(metric.size(), close - metric.size());
    const auto l = label_number(labels, "layer");
    const auto e = label_number(labels, "expert");
    double v = -1;
    try {
      v = std::stod(line.substr(close + 1));
    } catch (...) {
    }
    if (l < 0 || e < 0 || l > 100000 || e > 100000 || v < 0)
      return status::error("a malformed sample: " + line);
    counts[{l, e}] += static_cast<int64_t>(v);
    layers = std::max(layers, l + 1);
    experts = std::max(experts, e + 1);
  }
  if (counts.empty())
    return status::error("no tutti_serve_expert_tokens_total samples (not a "
                         "tutti serving replica's /metrics?)");
  auto st = placement::routing_stats::zeros(layers, experts, 1);
  for (const auto& [at, n] : counts)
    st.load[at.first * experts + at.second] = n;
  for (int64_t l = 0; l < layers; ++l) {
    int64_t pairs = 0;
    for (int64_t e = 0; e < experts; ++e)
      pairs += st.load_at(l, e);
    st.tokens = std::max(st.tokens, pairs);
  }
  return st;
}

} // namespace tutti::serve
