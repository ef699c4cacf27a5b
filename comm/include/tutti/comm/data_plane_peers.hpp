#pragma once
// Who is connected to a data-plane listener. Debian's Gloo (2022-05) takes
// any TCP connection to a device's listener and has no hook to refuse one,
// nor TLS; what tutti can do is look, after a communicator's mesh is up, at
// the connections the kernel holds on that listener's port
// (/proc/self/net/tcp and tcp6) and refuse the communicator when one comes
// from an address that is not a cluster node's.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::comm {

// The remote addresses of established connections to local `port` whose
// address is not one of `members` (host names or addresses, resolved).
expected<std::vector<std::string>> non_member_peers(
  uint16_t port, const std::vector<std::string>& members);

} // namespace tutti::comm
