#include "tutti/runtime/node_endpoint.hpp"

#include "tutti/runtime/log.hpp"

namespace tutti {

std::string read_boards(
  const std::vector<std::shared_ptr<metrics_board>>& boards) {
  std::string text;
  for (const auto& board : boards)
    text += board->read();
  return text;
}

expected<std::unique_ptr<net::metrics_endpoint>> serve_metrics(
  const std::string& host, int64_t port,
  std::vector<std::shared_ptr<metrics_board>> boards,
  const security::web_config& web,
  const std::function<void(net::http_server&)>& more_routes) {
  if (port <= 0 || port > 65535)
    return status::error("metrics.port: " + std::to_string(port)
                         + " is outside 1..65535");
  auto started = net::metrics_endpoint::start(
    host, static_cast<uint16_t>(port),
    [boards = std::move(boards)] { return read_boards(boards); }, web,
    more_routes);
  if (!started)
    return status::error(started.message() + " (metrics.port)");
  log_info("metrics", std::string("metrics on ")
                        + ((*started)->tls() ? "https://" : "http://") + host
                        + ":" + std::to_string(port) + "/metrics"
                        + (more_routes ? " and /dashboard" : "")
                        + (web.basic_auth() ? " (basic auth)" : ""));
  return started;
}

} // namespace tutti
