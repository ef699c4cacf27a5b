#include "tutti/serve/api_auth.hpp"

#include <httplib.h>

#include "tutti/security/api_keys.hpp"
#include "tutti/security/web_config.hpp"

namespace tutti::serve {

namespace {

void refuse(httplib::Response& res, int status, const std::string& message,
            const std::string& code) {
  res.status = status;
  res.set_content(R"({"error":{"message":")" + message
                    + R"(","type":"invalid_request_error","code":")" + code
                    + R"("}})",
                  "application/json");
}

} // namespace

status install_api_auth(httplib::Server& server, const serve_config& cfg) {
  std::shared_ptr<security::api_keys> keys;
  if (!cfg.api_keys.empty()) {
    auto loaded = security::api_keys::load(cfg.api_keys);
    if (!loaded)
      return loaded.error().with_context("serve.api_keys: ");
    keys = *loaded;
  }
  std::shared_ptr<const security::web_config> web;
  if (!cfg.metrics_web_config.empty()) {
    auto loaded = security::load_web_config(cfg.metrics_web_config);
    if (!loaded)
      return loaded.error().with_context("serve.metrics_web_config: ");
    web = std::make_shared<security::web_config>(std::move(*loaded));
  }
  if (!keys && !web)
    return {};
  server.set_pre_routing_handler(
    [keys, web](const httplib::Request& req, httplib::Response& res) {
      using result = httplib::Server::HandlerResponse;
      const auto authorization = req.get_header_value("Authorization");
      if (keys && req.path.rfind("/v1/", 0) == 0) {
        const auto verdict = keys->check(authorization);
        if (verdict.http_status == 401) {
          res.set_header("WWW-Authenticate", "Bearer");
          refuse(res, 401,
                 "a valid API key is needed (Authorization: Bearer "
                 "KEY)",
                 "invalid_api_key");
          return result::Handled;
        }
        if (verdict.http_status == 429) {
          res.set_header("Retry-After", std::to_string(verdict.retry_after_s));
          refuse(res, 429, "rate limit of this API key reached",
                 "rate_limit_exceeded");
          return result::Handled;
        }
      }
      if (web && req.path == "/metrics"
          && !security::basic_auth_allows(*web, authorization)) {
        res.status = 401;
        res.set_header("WWW-Authenticate", "Basic realm=\"tutti\"");
        res.set_content("unauthorized\n", "text/plain; charset=utf-8");
        return result::Handled;
      }
      return result::Unhandled;
    });
  return {};
}

} // namespace tutti::serve
