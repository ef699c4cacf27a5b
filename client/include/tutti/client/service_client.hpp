#pragma once
// A command's way to a service (`tutti serve`) on this machine: the client
// commands given its serve config reach the admin endpoints of its HTTP
// front (serve/service_admin.hpp) instead of a job's coordinator, and get
// the same shell_reply back. A service's `status` comes back as its JSON
// object in `lines` with `message` "service" (render/ shows it).

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

// Where the service of the serve config at `path` listens, as this machine
// reaches it (a front on any address: loopback). Refuses a config with
// listen port 0 (nothing says which port it got).
expected<endpoint> service_endpoint(const std::string& path);

// Whether a service answers at `at` ("cannot reach the service at ...").
status probe_service(const endpoint& at);

expected<shell_reply> service_shell(const endpoint& at,
                                    const std::string& command,
                                    const std::vector<std::string>& args,
                                    std::chrono::milliseconds wait);
expected<std::string> service_chaos(const endpoint& at,
                                    const chaos_request& request,
                                    std::chrono::milliseconds wait);

} // namespace tutti::client
