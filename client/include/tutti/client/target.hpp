#pragma once
// Where a job's coordinator (or one of its daemons) listens, as a command
// line names it: a job config file (its cluster_config.coordinator) or
// HOST:PORT.

#include <cstdint>
#include <string>

#include "tutti/base/status.hpp"

namespace tutti::client {

struct endpoint {
  std::string host;
  uint16_t port = 0;

  std::string text() const { return host + ":" + std::to_string(port); }
};

// `target` is a config file or HOST:PORT. Fails with one line: the config's
// problem ("config: ..."), or why `target` is neither.
expected<endpoint> resolve_target(const std::string& target);

} // namespace tutti::client
