#include "tutti/client/service_client.hpp"

#include <nlohmann/json.hpp>

#include "tutti/net/http_client.hpp"
#include "tutti/security/certs.hpp"
#include "tutti/security/tls.hpp"
#include "tutti/security/web_config.hpp"
#include "tutti/config/serve_config.hpp"

namespace tutti::client {

namespace {

using json = nlohmann::json;

// "cannot reach the service at HOST:PORT: why".
status unreachable(const endpoint& at, const net::http_client& c,
                   const status& failure) {
  std::string why = failure.message();
  if (c.last_failure() == net::transport_failure::connection)
    why = "nothing answers (is tutti serve running with this config?)";
  else if (c.last_failure() == net::transport_failure::tls_verification)
    why = "its certificate does not check against TUTTI_TLS_CA";
  return status::error("cannot reach the service at " + at.text() + ": "
                       + why);
}

// A client for `front`: HTTPS checked against TUTTI_TLS_CA where the front
// is on TLS, and the environment's token as a bearer.
expected<std::unique_ptr<net::http_client>> client_for(
  const service_front& front, std::chrono::milliseconds wait) {
  const auto& at = front.at;
  net::client_options o;
  o.host = at.host;
  o.port = static_cast<uint16_t>(at.port);
  o.connect_timeout = std::chrono::seconds(5);
  o.read_timeout = o.write_timeout = wait;
  if (front.tls) {
    const auto files = security::client_tls_files_from_environment();
    if (files.ca.empty())
      return status::error("the service at " + at.text()
                           + " speaks HTTPS (serve.metrics_web_config): set "
                             "TUTTI_TLS_CA to the CA that issued its "
                             "certificate");
    // The certificate's name, resolved to the address the config gives.
    o.tls = net::client_tls{files.ca, files.cert, files.key, front.server_name};
  }
  auto token = security::client_token_from_environment();
  if (!token)
    return token.error();
  if (!token->empty())
    o.bearer_token = token->reveal();
  return std::make_unique<net::http_client>(o);
}

// The admin endpoint's JSON answer ({"ok": ...}), or why there is none.
expected<json> post(const service_front& front, const std::string& path,
                    const net::param_map& params,
                    std::chrono::milliseconds wait) {
  const auto& at = front.at;
  auto c = client_for(front, wait);
  if (!c)
    return c.error();
  auto res = (*c)->post_form(path, params);
  if (!res)
    return unreachable(at, **c, res.error());
  auto body = json::parse(res->body, nullptr, false);
  if (body.is_object() && body.contains("ok"))
    return body;
  std::string why;
  if (body.is_object() && body.contains("error") && body["error"].is_object())
    why = ": " + body["error"].value("message", "");
  return status::error("the service at " + at.text() + " answered " + path
                       + " with HTTP " + std::to_string(res->status) + why);
}

// The admin endpoint's answer as the coordinator's would be.
shell_reply reply_of(const json& j) {
  shell_reply r;
  r.ok = j.value("ok", false);
  r.error = j.value("error", "");
  if (j.contains("status")) {
    r.message = "service";
    r.lines = {j["status"].dump()};
  }
  if (j.contains("lines"))
    for (const auto& l : j["lines"])
      r.lines.push_back(l.get<std::string>());
  if (j.contains("actors"))
    for (const auto& a : j["actors"])
      r.actors.push_back({a.value("path", ""), a.value("kind", ""),
                          a.value("state", ""), a.value("restarts", int64_t{0}),
                          -1});
  if (j.contains("message"))
    r.message = j["message"].get<std::string>();
  return r;
}

} // namespace

bool is_service_config(const std::string& path) {
  return serve::is_serve_config_file(path);
}

expected<service_front> service_endpoint(const std::string& path) {
  auto cfg = serve::load_serve_config(path);
  if (!cfg)
    return status::error("config: " + cfg.message());
  const auto& c = cfg.value();
  if (c.port == 0)
    return status::error(path + ": serve.listen has port 0 (any free port): "
                         "give the service a port to reach it by its config");
  std::string host = c.host;
  if (host.empty() || host == "0.0.0.0" || host == "*")
    host = "127.0.0.1";
  else if (host == "::" || host == "[::]")
    host = "::1";
  service_front front;
  front.at = endpoint{host, c.port};
  if (!c.metrics_web_config.empty()) {
    auto web = security::load_web_config(c.metrics_web_config);
    if (!web)
      return web.error().with_context(path + ": serve.metrics_web_config: ");
    front.tls = web->tls();
    if (front.tls) {
      auto name = security::certificate_host_name(web->cert_file);
      if (!name)
        return name.error().with_context(path + ": ");
      front.server_name = *name;
    }
  }
  return front;
}

status probe_service(const service_front& front) {
  const auto& at = front.at;
  auto c = client_for(front, std::chrono::seconds(5));
  if (!c)
    return c.error();
  auto res = (*c)->get("/health");
  if (!res)
    return unreachable(at, **c, res.error());
  if (res->status != 200)
    return status::error("the service at " + at.text() + " answered /health "
                         "with HTTP " + std::to_string(res->status));
  return {};
}

expected<shell_reply> service_shell(const service_front& front,
                                    const std::string& command,
                                    const std::vector<std::string>& args,
                                    std::chrono::milliseconds wait) {
  // The arguments as one JSON array: empty ones keep their places.
  auto j = post(front, "/admin/shell",
                {{"command", command}, {"args", json(args).dump()}}, wait);
  if (!j)
    return j.error();
  return reply_of(*j);
}

expected<std::string> service_chaos(const service_front& front,
                                    const chaos_request& request,
                                    std::chrono::milliseconds wait) {
  auto j = post(
    front, "/admin/chaos",
    {{"fault", request.fault}, {"rank", std::to_string(request.rank)}}, wait);
  if (!j)
    return j.error();
  if (!j->value("ok", false))
    return status::error(j->value("error", "refused"));
  return j->value("message", "");
}

} // namespace tutti::client
