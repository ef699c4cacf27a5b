#include "tutti/client/target.hpp"
#include "tutti/base/whole_number.hpp"

#include <filesystem>

#include "tutti/config/job_config.hpp"

namespace tutti::client {

namespace {

// 1..65535, all of `text` a number; 0 otherwise.
int64_t parse_port(const std::string& text) {
  const auto port = whole_number(text).value_or(0);
  return port > 0 && port <= 65535 ? port : 0;
}

} // namespace

expected<endpoint> resolve_target(const std::string& target) {
  if (std::filesystem::is_regular_file(target)) {
    const auto cfg = load_job_config(target);
    if (!cfg)
      return status::error("config: " + cfg.message());
    return endpoint{cfg->cluster.coordinator_host(),
                    static_cast<uint16_t>(cfg->cluster.coordinator_port())};
  }
  const auto colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return status::error("'" + target
                         + "' is neither a config file nor HOST:PORT");
  const auto port = parse_port(target.substr(colon + 1));
  if (port == 0)
    return status::error("'" + target
                         + "': the port must be a number in 1..65535");
  return endpoint{target.substr(0, colon), static_cast<uint16_t>(port)};
}

} // namespace tutti::client
