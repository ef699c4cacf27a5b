#pragma once
// Who may use the serving API: `Authorization: Bearer KEY` on /v1/* checked
// against the key hashes of serve.api_keys (401 without or with a wrong
// key, 429 with Retry-After past the key's rate), basic auth on /metrics
// (and a gateway's /admin/) from serve.metrics_web_config's basic_auth_users (401). /health and
// /ready stay open for probes. Without either file, nothing is checked.

namespace httplib {
class Server;
}

#include "tutti/base/status.hpp"
#include "tutti/serve/serve_config.hpp"

namespace tutti::serve {

// Reads the files and installs the check as `server`'s pre-routing
// handler. Fails in one line naming the file. `basic_auth_on_admin` false:
// /admin/ is left to the caller (a gateway with its own admin_policy).
status install_api_auth(httplib::Server& server, const serve_config& cfg,
                        bool basic_auth_on_admin = true);

} // namespace tutti::serve
