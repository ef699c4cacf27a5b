#include "tutti/security/web_endpoint.hpp"

#include <httplib.h>

#include <thread>

namespace tutti::security {

struct web_endpoint::impl {
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
};

web_endpoint::web_endpoint(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

web_endpoint::~web_endpoint() {
  impl_->server->stop();
  if (impl_->thread.joinable())
    impl_->thread.join();
}

expected<std::unique_ptr<web_endpoint>> web_endpoint::start(
  const std::string& host, uint16_t port, const web_config& config,
  const std::string& path, const std::string& content_type,
  std::function<std::string()> render) {
  auto p = std::make_unique<impl>();
  const auto where = host + ":" + std::to_string(port);
  if (config.tls()) {
    std::string why;
    p->server = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
      auto s = configure_server_tls(config, ctx);
      why = s.message();
      return s.ok();
    });
    if (!p->server->is_valid())
      return status::error("cannot serve TLS on " + where + ": "
                           + (why.empty() ? "no TLS context" : why));
  } else {
    p->server = std::make_unique<httplib::Server>();
  }
  auto& server = *p->server;
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_max_count(10);
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  server.Get(path, [config, content_type, render](const httplib::Request& req,
                                                  httplib::Response& res) {
    if (!basic_auth_allows(config, req.get_header_value("Authorization"))) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Basic realm=\"tutti\"");
      res.set_content("unauthorized\n", "text/plain; charset=utf-8");
      return;
    }
    try {
      res.set_content(render(), content_type.c_str());
    } catch (const std::exception& ex) {
      res.status = 500;
      res.set_content(std::string("rendering failed: ") + ex.what() + "\n",
                      "text/plain; charset=utf-8");
    }
  });
  int bound = port;
  if (port == 0)
    bound = server.bind_to_any_port(host);
  else if (!server.bind_to_port(host, port))
    bound = -1;
  if (bound <= 0)
    return status::error("cannot listen on " + where);
  auto* raw = p->server.get();
  p->thread = std::thread([raw] { raw->listen_after_bind(); });
  std::unique_ptr<web_endpoint> out(new web_endpoint(std::move(p)));
  out->port_ = static_cast<uint16_t>(bound);
  return out;
}

} // namespace tutti::security
