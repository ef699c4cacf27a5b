#pragma once
// An HTTP endpoint's TLS and basic auth, in Prometheus's web configuration
// file format (the `--web.config.file` of Prometheus and its exporters), so
// that a scrape config written for them works here:
//
//   tls_server_config:
//     cert_file: server.crt
//     key_file: server.key
//     client_ca_file: ca.crt   # optional: clients must present a cert
//     min_version: TLS13       # optional: TLS12 (default) or TLS13
//   basic_auth_users:
//     prometheus: $2b$12$...   # bcrypt hashes only (htpasswd -B, mkpasswd)
//
// Passwords are checked by libcrypt's bcrypt; nothing here stores or
// prints one.

#include <map>
#include <memory>
#include <string>

#include "tutti/base/status.hpp"

typedef struct ssl_ctx_st SSL_CTX;

namespace tutti::security {

struct web_config {
  std::string cert_file, key_file, client_ca_file;
  bool tls13_only = false;
  std::map<std::string, std::string> users; // user -> bcrypt hash

  bool tls() const { return !cert_file.empty(); }
  bool basic_auth() const { return !users.empty(); }
};

// Reads and checks the file: unknown keys, a hash that is not bcrypt, a
// missing certificate or key are refused in one line naming the key.
expected<web_config> load_web_config(const std::string& path);

// True when `authorization` (the request's Authorization header) is
// "Basic base64(user:password)" for a listed user whose bcrypt hash the
// password matches. Always true without basic_auth_users.
bool basic_auth_allows(const web_config& config,
                       const std::string& authorization);

// Sets up `ctx` (a server context) from tls_server_config: certificate,
// key, TLS 1.2 or 1.3 at least, and client certificates from
// client_ca_file required when it is given.
status configure_server_tls(const web_config& config, SSL_CTX& ctx);

// A new server context set up as configure_server_tls() says, for an
// HTTPS endpoint's connections (tls_stream::accept_web_client).
expected<std::shared_ptr<SSL_CTX>> server_tls_context(const web_config& config);

} // namespace tutti::security
