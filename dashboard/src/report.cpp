#include "tutti/dashboard/report.hpp"

#include <nlohmann/json.hpp>

#include "page_data.hpp"
#include "tutti/dashboard/step_log.hpp"

namespace tutti::dashboard {

namespace {

// JSON inside a <script> element: "</" would end it early.
std::string script_safe(std::string text) {
  for (size_t at = 0; (at = text.find("</", at)) != std::string::npos; at += 3)
    text.replace(at, 2, "<\\/");
  return text;
}

} // namespace

std::string report_html(const overview& about,
                        const std::filesystem::path& steps_file,
                        const std::vector<timeline_event>& events,
                        const std::vector<std::string>& coactivation) {
  using json = nlohmann::json;
  // Keep every step's counts, so each window below is exact.
  step_log steps(steps_file, 100);
  json windows = json::object();
  auto all = json::parse(steps.json(0, 0, 20000));
  for (int64_t window : {1, 10, 100})
    windows[std::to_string(window)] = json::parse(
      steps.json(0, window, 1))["experts"];
  windows["0"] = all["experts"];
  json pairs = json::array();
  for (const auto& layer : coactivation)
    pairs.push_back(layer.empty() ? json(nullptr) : json::parse(layer));
  json snapshot = {{"overview", json::parse(overview_json(about))},
                   {"coactivation", std::move(pairs)},
                   {"steps", std::move(all)},
                   {"windows", std::move(windows)},
                   {"events", json::parse(events_json(events))}};
  auto page = page_html();
  const auto at = page.find("<script>");
  const auto text = "<script>window.TUTTI_SNAPSHOT = "
                    + script_safe(snapshot.dump(-1, ' ', false,
                                                json::error_handler_t::replace))
                    + ";</script>\n";
  page.insert(at == std::string::npos ? page.size() : at, text);
  return page;
}

} // namespace tutti::dashboard
