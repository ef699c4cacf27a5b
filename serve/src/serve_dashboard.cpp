#include "serve_dashboard.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "tutti/runtime/log.hpp"

namespace tutti::serve {

namespace {

dashboard::overview serve_overview(service& svc, const serve_config& cfg) {
  dashboard::overview o;
  o.kind = "serving";
  o.title = svc.model().name;
  const auto& shape = svc.model().shape;
  o.layers = shape.layers;
  o.experts = shape.experts;
  const int64_t ranks = std::max<int64_t>(svc.limits().ep_ranks, 1);
  // One node per rack run of ranks would be a guess: one row, this node.
  o.nodes.push_back(
    {cfg.host, cfg.racks.empty() ? "" : cfg.racks[0], 0, ranks});
  const auto& layout = svc.limits().layout;
  for (int64_t l = 0; l < o.layers; ++l)
    for (int64_t e = 0; e < o.experts; ++e)
      o.expert_rank.push_back(layout
                                ? layout->rank_of(l, e)
                                : e * ranks / std::max<int64_t>(o.experts, 1));
  o.thresholds = {{"cross_rack_share", cfg.max_cross_rack_share}};
  return o;
}

// A log line's "time" (UTC, 2026-01-02T03:04:05.678Z) in unix ms; 0 if
// it is not one.
int64_t log_time_ms(const std::string& iso) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon,
                  &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms)
      != 7)
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
}

// The log's warnings and errors since `since_ms`.
std::vector<dashboard::timeline_event> log_events(int64_t since_ms) {
  std::vector<dashboard::timeline_event> out;
  for (const auto& line : read_log_lines("warn", 500)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object())
      continue;
    dashboard::timeline_event e;
    e.time_ms = log_time_ms(j.value("time", std::string()));
    if (e.time_ms < since_ms)
      continue;
    e.kind = j.value("level", std::string("warn")) + " "
             + j.value("actor", std::string());
    e.text = j.value("event", line);
    out.push_back(std::move(e));
  }
  return out;
}

} // namespace

dashboard::sources serve_dashboard(service& svc, const serve_config& cfg) {
  dashboard::sources s;
  s.about = serve_overview(svc, cfg);
  s.metrics = [&svc] { return svc.metrics().render(svc.model().name); };
  s.events = log_events;
  return s;
}

} // namespace tutti::serve
