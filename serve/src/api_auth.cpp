#include "tutti/serve/api_auth.hpp"

#include "tutti/net/access.hpp"
#include "tutti/security/api_keys.hpp"
#include "tutti/security/web_config.hpp"

namespace tutti::serve {

namespace {

void refuse(net::http_response& res, int status, const std::string& message,
            const std::string& code) {
  res.status = status;
  res.set_content(R"({"error":{"message":")" + message
                    + R"(","type":"invalid_request_error","code":")" + code
                    + R"("}})",
                  "application/json");
}

// The API keys' verdict on a request's Authorization header.
net::bearer_check api_key_check(std::shared_ptr<security::api_keys> keys) {
  return [keys](const std::string& authorization, net::http_response& res) {
    const auto verdict = keys->check(authorization);
    if (verdict.http_status == 401) {
      res.set_header("WWW-Authenticate", "Bearer");
      refuse(res, 401,
             "a valid API key is needed (Authorization: Bearer "
             "KEY)",
             "invalid_api_key");
      return true;
    }
    if (verdict.http_status == 429) {
      res.set_header("Retry-After", std::to_string(verdict.retry_after_s));
      refuse(res, 429, "rate limit of this API key reached",
             "rate_limit_exceeded");
      return true;
    }
    return false;
  };
}

} // namespace

status install_api_auth(net::http_server& server, const serve_config& cfg) {
  if (!cfg.api_keys.empty()) {
    auto loaded = security::api_keys::load(cfg.api_keys);
    if (!loaded)
      return loaded.error().with_context("serve.api_keys: ");
    server.add_guard(net::bearer_guard("/v1/", api_key_check(*loaded)));
  }
  if (!cfg.metrics_web_config.empty()) {
    auto loaded = security::load_web_config(cfg.metrics_web_config);
    if (!loaded)
      return loaded.error().with_context("serve.metrics_web_config: ");
    server.add_guard(
      net::basic_auth_guard(std::move(*loaded), [](const std::string& path) {
        return path == "/metrics" || path.rfind("/dashboard", 0) == 0;
      }));
  }
  return {};
}

} // namespace tutti::serve
