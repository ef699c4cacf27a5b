#include "tutti/runtime/node_endpoint.hpp"

#include "tutti/runtime/log.hpp"

namespace tutti {

expected<std::unique_ptr<net::metrics_endpoint>> serve_metrics(
  const std::string& host, int64_t port,
  std::vector<std::shared_ptr<metrics_board>> boards,
  const security::web_config& web) {
  if (port <= 0 || port > 65535)
    return status::error("metrics.port: " + std::to_string(port)
                         + " is outside 1..65535");
  auto started = net::metrics_endpoint::start(
    host, static_cast<uint16_t>(port),
    [boards = std::move(boards)] {
      std::string text;
      for (const auto& board : boards)
        text += board->read();
      return text;
    },
    web);
  if (!started)
    return status::error(started.message() + " (metrics.port)");
  log_info("metrics", std::string("metrics on ")
                        + ((*started)->tls() ? "https://" : "http://") + host
                        + ":" + std::to_string(port) + "/metrics"
                        + (web.basic_auth() ? " (basic auth)" : ""));
  return started;
}

} // namespace tutti
