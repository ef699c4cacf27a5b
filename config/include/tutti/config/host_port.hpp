#pragma once
// HOST:PORT, the way serve.listen, gateway.listen, the gateway's replicas
// and the command lines' --listen are written. A config key of this kind
// is a "text value" (field.hpp): read from and written as one string.

#include <cstdint>
#include <string>

#include "tutti/base/status.hpp"

namespace tutti {

struct host_port {
  std::string host;
  uint16_t port = 0;
};

// "HOST:PORT" into host and port (0..65535; the last ':' splits, so an
// IPv6 host may hold more). Refuses anything else in one line without the
// key, and leaves host and port as they were.
status parse_host_port(const std::string& text, std::string& host,
                       uint16_t& port);

std::string host_port_text(const std::string& host, uint16_t port);

inline status value_from_text(const std::string& text, host_port& out) {
  return parse_host_port(text, out.host, out.port);
}
inline std::string value_text(const host_port& a) {
  return host_port_text(a.host, a.port);
}

namespace config {

// One key over two members that stay apart: serve_config's and
// gateway_config's host and port, which their HTTP fronts read by name.
struct host_port_ref {
  std::string& host;
  uint16_t& port;
};

inline status value_from_text(const std::string& text, host_port_ref& out) {
  return parse_host_port(text, out.host, out.port);
}
inline std::string value_text(const host_port_ref& a) {
  return host_port_text(a.host, a.port);
}

} // namespace config
} // namespace tutti
