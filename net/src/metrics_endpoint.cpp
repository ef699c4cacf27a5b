#include "tutti/net/metrics_endpoint.hpp"

#include <exception>

#include "tutti/net/access.hpp"

namespace tutti::net {

namespace {

constexpr const char* metrics_type = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* plain_text = "text/plain; charset=utf-8";

// Scrapes are small and rare: a few threads, short limits, one request
// per connection.
server_options scrape_options(const std::string& host, uint16_t port,
                              const security::web_config& web) {
  server_options o;
  o.host = host;
  o.port = port;
  o.threads = 4;
  o.head_timeout = std::chrono::seconds(2);
  o.read_timeout = std::chrono::seconds(2);
  o.write_timeout = std::chrono::seconds(5);
  o.requests_per_connection = 1;
  o.max_head_bytes = 8 * 1024;
  o.max_body_bytes = 64 * 1024;
  o.tls = web;
  return o;
}

} // namespace

expected<std::unique_ptr<metrics_endpoint>> metrics_endpoint::start(
  const std::string& host, uint16_t port, std::function<std::string()> render,
  const security::web_config& web,
  const std::function<void(http_server&)>& more_routes) {
  auto server = std::make_unique<http_server>(scrape_options(host, port, web));
  server->add_guard(basic_auth_guard(web));
  server->get("/metrics", [render = std::move(render)](const http_request&,
                                                       http_response& res) {
    try {
      res.set_content(render(), metrics_type);
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(std::string("rendering metrics failed: ") + e.what()
                        + "\n",
                      plain_text);
    } catch (...) {
      res.status = 500;
      res.set_content("rendering metrics failed\n", plain_text);
    }
  });
  if (more_routes)
    more_routes(*server);
  server->get("/", [](const http_request&, http_response& res) {
    res.set_content("tutti metrics exporter: scrape /metrics\n", plain_text);
  });
  server->fallback([](const http_request& req, http_response& res) {
    if (req.method == "GET" || req.method == "HEAD") {
      res.status = 404;
      res.set_content("not found; metrics are at /metrics\n", plain_text);
      return;
    }
    res.status = 405;
    res.set_header("Allow", "GET");
    res.set_content("only GET is supported\n", plain_text);
  });
  if (auto s = server->start(); !s.ok())
    return s.with_context("metrics server: ");
  return std::unique_ptr<metrics_endpoint>(
    new metrics_endpoint(std::move(server)));
}

metrics_endpoint::~metrics_endpoint() = default;

} // namespace tutti::net
