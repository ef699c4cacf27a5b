#include "tutti/dashboard/dashboard.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <stdexcept>

#include "page_data.hpp"
#include "tutti/dashboard/prometheus_json.hpp"
#include "tutti/dashboard/step_log.hpp"

namespace tutti::dashboard {

extern const char* const asset_dashboard_html;
extern const char* const asset_dashboard_css;
extern const char* const asset_charts_js;
extern const char* const asset_dashboard_js;

namespace {

constexpr const char* json_type = "application/json";

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

// Replaces the first `marker` in `text` with `content`.
void put(std::string& text, const std::string& marker,
         const std::string& content) {
  if (auto at = text.find(marker); at != std::string::npos)
    text.replace(at, marker.size(), content);
}

// A query parameter that is not a whole number (its name).
struct bad_parameter : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t number_param(const net::http_request& req, const std::string& name,
                     int64_t otherwise) {
  const auto text = req.param(name);
  if (text.empty())
    return otherwise;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size() || errno == ERANGE)
    throw bad_parameter(name);
  return value;
}

// Runs `answer`; an exception becomes a 500 (a source failed) or a 400: a
// parameter that is not a number, or out of range (a source's
// std::out_of_range, e.g. a layer the model does not have).
template <class Answer>
void guarded(net::http_response& res, Answer answer) {
  try {
    answer();
  } catch (const bad_parameter& e) {
    res.status = 400;
    res.set_content(std::string(e.what()) + " must be a whole number\n",
                    "text/plain; charset=utf-8");
  } catch (const std::out_of_range& e) {
    res.status = 400;
    res.set_content(std::string(e.what()) + "\n", "text/plain; charset=utf-8");
  } catch (const std::exception& e) {
    res.status = 500;
    res.set_content(std::string("dashboard: ") + e.what() + "\n",
                    "text/plain; charset=utf-8");
  }
}

} // namespace

std::string page_html() {
  std::string page = asset_dashboard_html;
  put(page, "/*@dashboard.css@*/", asset_dashboard_css);
  put(page, "/*@charts.js@*/", asset_charts_js);
  put(page, "/*@dashboard.js@*/", asset_dashboard_js);
  put(page, "/*@snapshot@*/", "");
  return page;
}

std::string overview_json(const overview& about) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : about.nodes)
    nodes.push_back({{"host", n.host},
                     {"rack", n.rack},
                     {"first_rank", n.first_rank},
                     {"ranks", n.ranks}});
  return nlohmann::json{{"kind", about.kind},
                        {"title", about.title},
                        {"nodes", std::move(nodes)},
                        {"layers", about.layers},
                        {"experts", about.experts},
                        {"steps", about.steps},
                        {"expert_rank", about.expert_rank},
                        {"thresholds", about.thresholds}}
    .dump();
}

std::string events_json(const std::vector<timeline_event>& events) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& e : events)
    out.push_back({{"time_ms", e.time_ms}, {"kind", e.kind}, {"text", e.text}});
  // Text from logs may hold any bytes: replace what is not UTF-8.
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void add_routes(net::http_server& server, sources from) {
  auto page = std::make_shared<const std::string>(page_html());
  auto about = std::make_shared<const std::string>(overview_json(from.about));
  std::shared_ptr<step_log> steps;
  if (!from.step_log.empty())
    steps = std::make_shared<step_log>(from.step_log);

  auto send_page = [page](const net::http_request&, net::http_response& res) {
    res.set_content(*page, "text/html; charset=utf-8");
    res.set_header("Cache-Control", "no-store");
  };
  server.get("/dashboard", send_page);
  server.get("/dashboard/", send_page);
  server.get("/dashboard/api/overview",
             [about](const net::http_request&, net::http_response& res) {
               res.set_content(*about, json_type);
             });
  server.get("/dashboard/api/metrics",
             [metrics = from.metrics](const net::http_request&,
                                      net::http_response& res) {
               guarded(res, [&] {
                 auto parsed = parse_prometheus(metrics ? metrics() : "");
                 if (!parsed)
                   throw std::runtime_error(parsed.message());
                 res.set_content(samples_json(*parsed, unix_ms()), json_type);
               });
             });
  server.get("/dashboard/api/steps", [steps](const net::http_request& req,
                                             net::http_response& res) {
    guarded(res, [&] {
      const auto since = number_param(req, "since", 0);
      const auto window = number_param(req, "window", 0);
      res.set_content(steps ? steps->json(since, window)
                            : R"({"last_step":0,"steps":[],"experts":null})",
                      json_type);
    });
  });
  server.get("/dashboard/api/coactivation",
             [pairs = from.coactivation](const net::http_request& req,
                                         net::http_response& res) {
               guarded(res, [&] {
                 const auto layer = number_param(req, "layer", 0);
                 auto text = pairs ? pairs(layer) : std::string();
                 res.set_content(text.empty() ? "null" : text, json_type);
               });
             });
  server.get("/dashboard/api/events", [events = from.events](
                                        const net::http_request& req,
                                        net::http_response& res) {
    guarded(res, [&] {
      const auto since = number_param(req, "since", 0);
      res.set_content(
        events_json(events ? events(since) : std::vector<timeline_event>{}),
        json_type);
    });
  });
}

std::function<void(net::http_server&)> routes(sources from) {
  return [from = std::move(from)](net::http_server& server) {
    add_routes(server, from);
  };
}

} // namespace tutti::dashboard
