#pragma once
// A command's way to a service (`tutti serve`) on this machine: the client
// commands given its serve config reach the admin endpoints of its HTTP
// front (serve/service_admin.hpp) instead of a job's coordinator, and get
// the same shell_reply back. A service's `status` comes back as its JSON
// object in `lines` with `message` "service" (render/ shows it).
//
// A front on HTTPS (serve.metrics_web_config's tls_server_config) is
// reached over TLS: its certificate is checked against TUTTI_TLS_CA under
// the name the certificate gives, and TUTTI_TLS_CERT / TUTTI_TLS_KEY are
// shown when set (a front with client_ca_file wants one). A token of
// TUTTI_TOKEN_FILE or TUTTI_TOKEN goes along as a bearer (serve.
// admin_policy: how another machine, or a role, is let in).

#include <chrono>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/client/target.hpp"
#include "tutti/protocol/messages.hpp"
#include "tutti/protocol/shell_messages.hpp"

namespace tutti::client {

// Whether `path` is a serve config (a `serve:` section or an
// InferenceService manifest) rather than a job's.
bool is_service_config(const std::string& path);

// A service's front as this machine reaches it.
struct service_front {
  endpoint at;
  bool tls = false;
  std::string server_name; // over TLS: the name its certificate gives
};

// Where the service of the serve config at `path` listens, as this machine
// reaches it (a front on any address: loopback), and whether over TLS.
// Refuses a config with listen port 0 (nothing says which port it got).
expected<service_front> service_endpoint(const std::string& path);

// Whether a service answers at `front` ("cannot reach the service at
// ...").
status probe_service(const service_front& front);

expected<shell_reply> service_shell(const service_front& front,
                                    const std::string& command,
                                    const std::vector<std::string>& args,
                                    std::chrono::milliseconds wait);
expected<std::string> service_chaos(const service_front& front,
                                    const chaos_request& request,
                                    std::chrono::milliseconds wait);

} // namespace tutti::client
