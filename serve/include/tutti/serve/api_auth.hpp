#pragma once
// Who may use the serving API: `Authorization: Bearer KEY` on /v1/* checked
// against the key hashes of serve.api_keys (401 without or with a wrong
// key, 429 with Retry-After past the key's rate), basic auth on /metrics
// and /dashboard from serve.metrics_web_config's basic_auth_users (401).
// /health and
// /ready stay open for probes; /admin/ is each front's admin_access
// (security/admin_access.hpp). Without either file, nothing is checked.

#include "tutti/base/status.hpp"
#include "tutti/config/serve_config.hpp"
#include "tutti/net/http_server.hpp"

namespace tutti::serve {

// Reads the files and adds the checks to `server`'s guards. Fails in one
// line naming the file.
status install_api_auth(net::http_server& server, const serve_config& cfg);

} // namespace tutti::serve
