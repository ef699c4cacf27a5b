#include "gateway_admin.hpp"

#include "tutti/net/http_client.hpp"
#include "tutti/security/secret.hpp"
#include "tutti/security/tls.hpp"
#include "tutti/config/host_port.hpp"

namespace tutti::cli {

namespace {

gateway_admin_answer failed(int exit_status, std::string text) {
  return {exit_status, std::move(text)};
}

} // namespace

gateway_admin_answer gateway_admin_request(const std::string& action,
                                           const std::string& address,
                                           const std::string& token_file) {
  std::string method, path;
  if (action == "status")
    method = "GET", path = "/admin/status";
  else if (action == "events")
    method = "GET", path = "/admin/events";
  else if (action == "promote" || action == "rollback")
    method = "POST", path = "/admin/" + action;
  else
    return failed(2, "unknown action '" + action
                       + "' (status, events, promote, rollback)");
  std::string host;
  uint16_t port = 0;
  if (auto s = parse_host_port(address, host, port); !s.ok())
    return failed(2, "HOST:PORT: " + s.message());
  auto token = token_file.empty() ? security::client_token_from_environment()
                                  : security::secret_from_file(token_file);
  if (!token)
    return failed(2, (token_file.empty() ? "" : "--token-file: ")
                       + token.message());
  net::client_options o;
  o.host = host;
  o.port = port;
  o.connect_timeout = std::chrono::seconds(5);
  o.read_timeout = std::chrono::seconds(10);
  if (!token->empty())
    o.bearer_token = token->reveal();
  net::http_client cli(o);
  auto r = method == "GET" ? cli.get(path)
                           : cli.post(path, "", "application/json");
  if (!r)
    return failed(1, host + ":" + std::to_string(port) + ": " + r.message());
  return {r->status == 200 ? 0 : (r->status == 409 ? 2 : 1), r->body};
}

} // namespace tutti::cli
