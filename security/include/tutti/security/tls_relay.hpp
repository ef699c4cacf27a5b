#pragma once
// Copying bytes between a TLS connection and a plain loopback socket: the
// daemon's guard (TLS from the network, plain to CAF's middleman) and the
// outgoing forwarder (plain from CAF, TLS to the network) both use it.

#include <atomic>
#include <functional>
#include <string>

#include "tutti/security/tls.hpp"

namespace tutti::security {

// Sees each chunk that came in over TLS before it is passed on; "" to pass
// it, else why the connection is closed.
using tls_inspector = std::function<std::string(const char*, size_t)>;

// Asked about once a second whether the connection may stay open; "" to
// keep it, else why it is closed (a revoked certificate).
using tls_recheck = std::function<std::string()>;

// Copies both ways until a side closes, `stop` is set (checked every
// 200 ms) or `recheck` says no. Returns "" or why it closed the
// connection. Sockets are neither owned nor closed.
std::string relay(tls_stream& tls, int plain, const std::atomic<bool>& stop,
                  const tls_inspector& inspect = {},
                  const tls_recheck& recheck = {});

} // namespace tutti::security
