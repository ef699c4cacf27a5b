#pragma once
// basp_guard: the public TCP front door of a daemon's published actor. It
// accepts on the address the config gives, reads every BASP message header
// a peer sends (a known operation, a handshake first and never empty, a
// payload within a cap) and passes the bytes on to the middleman, which
// listens on loopback only. A peer that breaks the rules loses its
// connection; the daemon and its job go on.
//
// Why: CAF 0.17.6's BASP broker dereferences the payload of a handshake
// header announcing none (SIGSEGV), and buffers whatever payload size a
// header announces; both are reachable by anyone who can connect.
//
// With TLS (security.tls), the guard first runs a mutual TLS 1.3 handshake
// within a time limit: a peer without a certificate from the cluster CA
// never gets a byte to the middleman. Whom each passed connection belongs
// to goes into security::peer_registry under its loopback port.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/security/tls.hpp"

namespace tutti {

// Mutual TLS in front of the middleman (no endpoint: plain TCP).
struct basp_guard_tls {
  std::shared_ptr<security::tls_endpoint> endpoint;
  std::chrono::milliseconds handshake_limit{5000};
  // Set: a client without a certificate may present an admin-issued token
  // ("TUTTI-TOKEN <token>\n" first thing after the handshake) and is let
  // through as the user it names.
  std::function<std::optional<security::identity>(const security::secret&)>
    token_identity;
};

class basp_guard {
public:
  // Largest payload one BASP message may announce.
  static constexpr uint32_t max_payload = 64u << 20;

  using tls_options = basp_guard_tls;

  // Listens on host:port and forwards to 127.0.0.1:backend_port.
  static status start(const std::string& host, uint16_t port,
                      uint16_t backend_port, std::unique_ptr<basp_guard>& out,
                      tls_options tls = {});
  ~basp_guard(); // stops accepting and closes every connection

  struct impl;

private:
  explicit basp_guard(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace tutti
