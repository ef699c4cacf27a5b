#pragma once
// The HTTP front of a service (net/'s server, on its own thread pool; no
// engine work runs on its threads): POST /v1/completions and
// /v1/chat/completions (JSON or server-sent events), GET /v1/models,
// /health (alive), /ready (503 until the service runs), /metrics
// (Prometheus); POST /admin/shell and /admin/chaos
// answer the client commands (service_admin.hpp): peers on this machine,
// others with a token of serve.admin_policy (security/admin_access.hpp). Errors in OpenAI's JSON shape: 400
// bad fields, 404 unknown model or path, 413 body over the limit, 429 with
// Retry-After on a full queue, 503 not ready, 504 request timeout. A
// streaming client that goes away cancels its request, which frees its KV
// blocks. With a serve.metrics_web_config that has a tls_server_config the
// whole front (the API, the probes and /metrics: one listener) is HTTPS,
// with the certificate, key and client CA that config names (security/).

#include <cstdint>
#include <memory>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/net/http_server.hpp"
#include "tutti/security/admin_access.hpp"
#include "tutti/config/serve_config.hpp"
#include "tutti/serve/completion_api.hpp"
#include "tutti/serve/service.hpp"

namespace tutti::serve {

struct admin_context;

class http_front {
public:
  // Binds cfg.host:cfg.port (0: any free port) and serves on a thread.
  static expected<std::unique_ptr<http_front>> start(service& svc,
                                                     const serve_config& cfg);
  ~http_front();
  void stop();
  uint16_t port() const { return port_; }
  bool tls() const { return tls_; }

private:
  http_front(service& svc, const serve_config& cfg,
             std::unique_ptr<net::http_server> server);
  void routes();
  // POST /v1/completions and /v1/chat/completions; `parse` is
  // parse_completion or parse_chat (completion_api.hpp).
  using parse_fn = parsed_completion (*)(const std::string&,
                                         const served_model&, uint64_t);
  void answer(const net::http_request& req, net::http_response& res,
              parse_fn parse);

  service& service_;
  serve_config cfg_;
  std::unique_ptr<net::http_server> server_;
  uint16_t port_ = 0;
  bool tls_ = false;
  std::shared_ptr<admin_context> admin_; // the admin endpoints' view
  security::admin_access access_;        // who may use them
};

} // namespace tutti::serve
