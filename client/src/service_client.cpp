#include "tutti/client/service_client.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tutti/serve/serve_config.hpp"

namespace tutti::client {

namespace {

using json = nlohmann::json;

// "cannot reach the service at HOST:PORT: why".
status unreachable(const endpoint& at, httplib::Error e) {
  const auto why = e == httplib::Error::Connection
                     ? std::string("nothing answers (is tutti serve running "
                                   "with this config?)")
                     : httplib::to_string(e);
  return status::error("cannot reach the service at " + at.text() + ": "
                       + why);
}

void set_timeouts(httplib::Client& c, std::chrono::milliseconds wait) {
  c.set_connection_timeout(std::chrono::seconds(5));
  c.set_read_timeout(wait);
  c.set_write_timeout(wait);
}

// The admin endpoint's JSON answer ({"ok": ...}), or why there is none.
expected<json> post(const endpoint& at, const std::string& path,
                    const httplib::Params& params,
                    std::chrono::milliseconds wait) {
  httplib::Client c(at.host, at.port);
  set_timeouts(c, wait);
  auto res = c.Post(path, params);
  if (!res)
    return unreachable(at, res.error());
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

expected<endpoint> service_endpoint(const std::string& path) {
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
  return endpoint{host, c.port};
}

status probe_service(const endpoint& at) {
  httplib::Client c(at.host, at.port);
  set_timeouts(c, std::chrono::seconds(5));
  auto res = c.Get("/health");
  if (!res)
    return unreachable(at, res.error());
  if (res->status != 200)
    return status::error("the service at " + at.text() + " answered /health "
                         "with HTTP " + std::to_string(res->status));
  return {};
}

expected<shell_reply> service_shell(const endpoint& at,
                                    const std::string& command,
                                    const std::vector<std::string>& args,
                                    std::chrono::milliseconds wait) {
  // The arguments as one JSON array: empty ones keep their places.
  auto j = post(at, "/admin/shell",
                {{"command", command}, {"args", json(args).dump()}}, wait);
  if (!j)
    return j.error();
  return reply_of(*j);
}

expected<std::string> service_chaos(const endpoint& at,
                                    const chaos_request& request,
                                    std::chrono::milliseconds wait) {
  auto j = post(at, "/admin/chaos",
                {{"fault", request.fault},
                 {"rank", std::to_string(request.rank)}},
                wait);
  if (!j)
    return j.error();
  if (!j->value("ok", false))
    return status::error(j->value("error", "refused"));
  return j->value("message", "");
}

} // namespace tutti::client
