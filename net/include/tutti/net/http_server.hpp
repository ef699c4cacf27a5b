#pragma once
// tutti's one HTTP server (cpp-httplib underneath), for every endpoint a
// process offers: a daemon's /metrics, the serving front, the gateway.
//
// It serves on its own threads (a bounded pool; never CAF's workers) and
// reads each request head itself before cpp-httplib parses it, so that
// every connection is bounded in time and size whatever the client does:
// the whole head must arrive within head_timeout (a client sending one
// byte at a time is cut off), a malformed or oversized head gets a 400,
// and a client that closes mid-head gets nothing. HTTPS comes from a
// Prometheus web config's tls_server_config (security/web_config.hpp).
// stop() closes idle connections at once and lets requests in progress
// finish.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/net/http_message.hpp"
#include "tutti/security/web_config.hpp"

namespace tutti::net {

using std::chrono::milliseconds;

struct server_options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see http_server::port())
  size_t threads = 8; // connections served at once; more wait their turn
  milliseconds head_timeout{30000};      // a request's line and headers
  milliseconds read_timeout{30000};      // each read of a body
  milliseconds write_timeout{30000};     // each write of an answer
  milliseconds keep_alive_timeout{5000}; // wait for the next request
  size_t requests_per_connection = 5;    // 1: every answer closes
  size_t max_head_bytes = 64 * 1024;
  size_t max_body_bytes = 0; // 0: no limit; over it: 413
  // HTTPS when tls.tls() (its basic_auth_users are for a guard:
  // access.hpp).
  security::web_config tls;
};

using handler = std::function<void(const http_request&, http_response&)>;
// Runs before routing, on the request head (no body yet): true refuses
// the request with `refusal` as its answer.
using guard = std::function<bool(const http_request&, http_response& refusal)>;
// Fills in an answer of status >= 400 whose body is still empty (cpp-
// httplib's own 400/404/413 and the server's 400 for a malformed head),
// so a part can give every error its own shape.
using error_page = std::function<void(const http_request&, http_response&)>;

class http_server {
public:
  explicit http_server(server_options options);
  ~http_server(); // stop()
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // Routes, matched on the exact path in the order given; add them before
  // start(). A request no route takes goes to the fallback (any method),
  // else gets 404.
  void get(const std::string& path, handler h);
  void post(const std::string& path, handler h);
  void fallback(handler h);
  void add_guard(guard g);
  void set_error_page(error_page page);

  // Binds host:port and serves on its own threads. Fails in one line:
  // "cannot listen on HOST:PORT: why", or the TLS file that would not
  // load.
  status start();
  void stop();

  uint16_t port() const; // the port bound (after start)
  bool tls() const;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace tutti::net
