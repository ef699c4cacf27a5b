// HOST:PORT as one piece of text.

#include "tutti/config/host_port.hpp"

namespace tutti {

status parse_host_port(const std::string& text, std::string& host,
                       uint16_t& port) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return status::error("must be HOST:PORT, got '" + text + "'");
  const auto digits = text.substr(colon + 1);
  if (digits.empty() || digits.size() > 5
      || digits.find_first_not_of("0123456789") != std::string::npos
      || std::stoi(digits) > 65535)
    return status::error("port must be 0..65535, got '" + digits + "'");
  host = text.substr(0, colon);
  port = static_cast<uint16_t>(std::stoi(digits));
  return {};
}

std::string host_port_text(const std::string& host, uint16_t port) {
  return host + ":" + std::to_string(port);
}

} // namespace tutti
