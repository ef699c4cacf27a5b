#pragma once
// Who may reach a server's routes (http_server.hpp's guards): basic auth
// from a Prometheus web config's basic_auth_users (bcrypt, as Prometheus
// and its exporters check it), and bearer tokens or API keys through a
// check the caller gives.

#include <functional>
#include <string>

#include "tutti/net/http_server.hpp"
#include "tutti/security/web_config.hpp"

namespace tutti::net {

// Chooses the paths a guard looks at; an empty one takes every path.
using path_filter = std::function<bool(const std::string& path)>;

// Refuses requests on the paths `applies` takes without a valid
// "Authorization: Basic ..." for one of `config`'s users: 401 with
// WWW-Authenticate: Basic realm="tutti" and "unauthorized\n". Lets
// everything through when the config lists no users.
guard basic_auth_guard(security::web_config config, path_filter applies = {});

// Gets the request's Authorization header ("" when it has none); true to
// refuse, with `refusal` filled in (its status, a WWW-Authenticate or
// Retry-After header, the part's error body).
using bearer_check =
  std::function<bool(const std::string& authorization, http_response& refusal)>;
// Runs `check` on requests whose path starts with `prefix`.
guard bearer_guard(std::string prefix, bearer_check check);

} // namespace tutti::net
