#include "tutti/net/access.hpp"

namespace tutti::net {

guard basic_auth_guard(security::web_config config, path_filter applies) {
  return [config = std::move(config), applies = std::move(applies)](
           const http_request& req, http_response& refusal) {
    if (!config.basic_auth() || (applies && !applies(req.path)))
      return false;
    if (security::basic_auth_allows(config, req.header("Authorization")))
      return false;
    refusal.status = 401;
    refusal.set_header("WWW-Authenticate", "Basic realm=\"tutti\"");
    refusal.set_content("unauthorized\n", "text/plain; charset=utf-8");
    return true;
  };
}

guard bearer_guard(std::string prefix, bearer_check check) {
  return [prefix = std::move(prefix), check = std::move(check)](
           const http_request& req, http_response& refusal) {
    return req.path.rfind(prefix, 0) == 0
           && check(req.header("Authorization"), refusal);
  };
}

} // namespace tutti::net
