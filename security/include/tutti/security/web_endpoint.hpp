#pragma once
// One GET endpoint (a daemon's /metrics) served over HTTP or HTTPS behind a
// web config (web_config.hpp): TLS from tls_server_config, and requests
// without valid basic auth answered 401. cpp-httplib serves it on its own
// threads; every read and write has a time limit.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/security/web_config.hpp"

namespace tutti::security {

class web_endpoint {
public:
  // Listens on host:port (0: any free port) and answers GET `path` with
  // render()'s text of `content_type`. Fails in one line naming host:port
  // or the TLS file that would not load.
  static expected<std::unique_ptr<web_endpoint>> start(
    const std::string& host, uint16_t port, const web_config& config,
    const std::string& path, const std::string& content_type,
    std::function<std::string()> render);
  ~web_endpoint(); // stops serving

  uint16_t port() const { return port_; }
  struct impl;

private:
  explicit web_endpoint(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
  uint16_t port_ = 0;
};

} // namespace tutti::security
