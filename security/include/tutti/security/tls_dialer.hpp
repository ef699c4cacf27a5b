#pragma once
// Outgoing control-plane connections under TLS. CAF's middleman speaks
// plain TCP, so once TLS is installed, each remote HOST:PORT gets a local
// forwarder on 127.0.0.1: the middleman connects there, and the forwarder
// opens a TLS connection to the remote (presenting this process's
// certificate, requiring a node certificate from the cluster CA) and
// copies bytes. Without TLS installed, route() returns the remote itself.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/security/tls.hpp"

namespace tutti::security::tls_dialer {

struct address {
  std::string host;
  uint16_t port = 0;
};

// From now on, route() wraps connections in TLS with `client`.
// `token`: for a client without a certificate, sent first on every
// connection (an admin-issued token, access_policy.hpp).
void install(std::shared_ptr<tls_endpoint> client,
             std::chrono::milliseconds handshake_limit,
             const secret& token = {});
bool installed();

// Where to connect to reach `host:port`: a loopback forwarder when TLS is
// installed, else the remote itself.
expected<address> route(const std::string& host, uint16_t port);

// Why the newest TLS connection to `host:port` failed ("" if it did not).
std::string last_failure(const std::string& host, uint16_t port);

// Closes every forwarder and connection (tests; process exit does too).
void shutdown();

} // namespace tutti::security::tls_dialer
