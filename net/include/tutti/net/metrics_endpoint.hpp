#pragma once
// A process's Prometheus endpoint (a daemon's, `tutti run`'s): GET /metrics
// answers render()'s text, GET / says where the metrics are, routes a
// caller adds (the dashboard) answer theirs, other paths are 404 and other
// methods 405. With a Prometheus web config it is HTTPS
// (tls_server_config) and asks for basic auth (basic_auth_users) on every
// path. Each answer closes its connection; a head must arrive within 2 s,
// so scrapes are cheap and bad clients cost little.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/net/http_server.hpp"
#include "tutti/security/web_config.hpp"

namespace tutti::net {

class metrics_endpoint {
public:
  // Listens on host:port (0: any free port). render() runs on a server
  // thread once per scrape; if it throws, the scrape gets a 500 saying
  // why. `more_routes` adds routes to the server before it starts; they
  // are behind the same TLS and auth. Fails in one line naming host:port
  // and the system's reason, or the TLS file that would not load.
  static expected<std::unique_ptr<metrics_endpoint>> start(
    const std::string& host, uint16_t port, std::function<std::string()> render,
    const security::web_config& web = {},
    const std::function<void(http_server&)>& more_routes = {});
  // Stops within a fraction of a second, even with clients connected.
  ~metrics_endpoint();

  uint16_t port() const { return server_->port(); }
  bool tls() const { return server_->tls(); }

private:
  explicit metrics_endpoint(std::unique_ptr<http_server> server)
    : server_(std::move(server)) {}
  std::unique_ptr<http_server> server_;
};

} // namespace tutti::net
