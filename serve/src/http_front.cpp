#include "tutti/serve/http_front.hpp"

#include <httplib.h>

#include "tutti/serve/api_auth.hpp"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <random>

#include "tutti/base/whole_number.hpp"
#include "tutti/security/web_config.hpp"
#include "tutti/serve/completion_api.hpp"
#include "tutti/serve/service_admin.hpp"

namespace tutti::serve {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

const char* json_type = "application/json";

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& param = {}) {
  res.status = status;
  res.set_content(error_body(message, type, param), json_type);
}

// Where a finished request's reason is not a completion (timeout, error,
// service stopping), the status and error type it maps to.
bool failed(finish_reason f, int& status, std::string& type) {
  switch (f) {
  case finish_reason::timeout:
    status = 504, type = "timeout";
    return true;
  case finish_reason::error:
    status = 500, type = "server_error";
    return true;
  case finish_reason::cancelled:
    status = 503, type = "service_unavailable";
    return true;
  default:
    return false;
  }
}

// A peer on the machine the service runs on: loopback or (a front bound
// to one address) that address connecting to itself.
bool on_this_machine(const httplib::Request& req) {
  return security::is_loopback_address(req.remote_addr)
         || (!req.remote_addr.empty() && req.remote_addr == req.local_addr);
}

// True to go on; else `res` holds the refusal (401 or 403, one line).
bool admitted(const security::admin_access& access, const httplib::Request& req,
              httplib::Response& res, const std::string& action) {
  const auto a = access.admit(on_this_machine(req), req.remote_addr,
                              req.get_header_value("Authorization"), action);
  if (a.admitted())
    return true;
  if (a.http_status == 401)
    res.set_header("WWW-Authenticate", "Bearer");
  send_error(res, a.http_status, a.message, a.type);
  return false;
}

void send_admin(httplib::Response& res, const admin_answer& a) {
  res.status = a.http_status;
  res.set_content(a.body, json_type);
}

// What a streaming response keeps between calls of its content provider.
struct stream_state {
  service* svc;
  uint64_t id;
  std::shared_ptr<request_stream> events;
  std::string cmpl_id, model;
  int64_t created = 0, offset = 0;
  completion_options options;
  bool finished = false;
};

} // namespace

http_front::http_front(service& svc, const serve_config& cfg,
                       std::unique_ptr<httplib::Server> server)
  : service_(svc), cfg_(cfg), server_(std::move(server)) {}

namespace {

// HTTPS where serve.metrics_web_config has a tls_server_config, else HTTP.
expected<std::unique_ptr<httplib::Server>> make_server(const serve_config& cfg,
                                                       bool& tls) {
  tls = false;
  if (cfg.metrics_web_config.empty())
    return std::make_unique<httplib::Server>();
  auto web = security::load_web_config(cfg.metrics_web_config);
  if (!web)
    return web.error().with_context("serve.metrics_web_config: ");
  if (!web->tls())
    return std::make_unique<httplib::Server>();
  std::string why;
  auto server = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
    auto s = security::configure_server_tls(*web, ctx);
    why = s.message();
    return s.ok();
  });
  if (!server->is_valid())
    return status::error("serve.metrics_web_config: no TLS context"
                         + (why.empty() ? std::string() : ": " + why));
  tls = true;
  return std::unique_ptr<httplib::Server>(std::move(server));
}

} // namespace

http_front::~http_front() { stop(); }

void http_front::stop() {
  if (server_)
    server_->stop();
  if (thread_.joinable())
    thread_.join();
}

expected<std::unique_ptr<http_front>> http_front::start(
  service& svc, const serve_config& cfg) {
  bool tls = false;
  auto made = make_server(cfg, tls);
  if (!made)
    return made.error();
  std::unique_ptr<http_front> f(
    new http_front(svc, cfg, std::move(made.value())));
  f->tls_ = tls;
  auto access = security::admin_access::open(cfg.admin_policy,
                                             "serve.admin_policy");
  if (!access)
    return access.error();
  f->access_ = std::move(*access);
  auto& server = *f->server_;
  // Every connection waits on its request: one thread each for as many as
  // may be running and queued, and a few more to answer 429s and probes.
  const int64_t threads = cfg.http_threads > 0 ? cfg.http_threads
                                               : cfg.limits.batch.max_sequences
                                                   + cfg.limits.max_queue + 8;
  server.new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  server.set_payload_max_length(static_cast<size_t>(cfg.max_body_bytes));
  server.set_read_timeout(30, 0);
  server.set_write_timeout(30, 0);
  // libcpp-httplib is built with a listen backlog of 5: a burst of clients
  // (a load generator's first wave) overflows it and some connections are
  // reset. The listening socket is kept here and given a real backlog.
  std::atomic<int> listen_fd{-1};
  server.set_socket_options([&listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd = sock;
  });
  f->routes();
  TUTTI_RETURN_IF_ERROR(install_api_auth(server, cfg));
  int port = cfg.port;
  if (cfg.port == 0)
    port = server.bind_to_any_port(cfg.host);
  else if (!server.bind_to_port(cfg.host, cfg.port))
    port = -1;
  if (port <= 0)
    return status::error("cannot listen on " + cfg.host + ":"
                         + std::to_string(cfg.port));
  if (::listen(listen_fd.load(), SOMAXCONN) != 0)
    return status::error("listen on " + cfg.host + ":" + std::to_string(port)
                         + ": " + std::strerror(errno));
  f->port_ = static_cast<uint16_t>(port);
  f->admin_->address = cfg.host + ":" + std::to_string(port);
  f->thread_ = std::thread([&server] { server.listen_after_bind(); });
  return f;
}

void http_front::routes() {
  auto& server = *server_;
  const int64_t created = unix_now();

  server.set_error_handler(httplib::Server::HandlerWithResponse(
    [](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty())
        return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 413)
        send_error(res, 413, "the request body is over the limit",
                   "invalid_request_error");
      else if (res.status == 404)
        send_error(res, 404, "no such path", "invalid_request_error");
      else
        send_error(res, res.status, "request failed", "invalid_request_error");
      return httplib::Server::HandlerResponse::Handled;
    }));

  server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", json_type);
  });
  server.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
    if (service_.shards_up())
      res.set_content(R"({"status":"ready"})", json_type);
    else
      send_error(res, 503, "the model is not ready", "service_unavailable");
  });
  server.Get("/metrics",
             [this](const httplib::Request&, httplib::Response& res) {
               res.set_content(service_.metrics().render(service_.model().name),
                               "text/plain; version=0.0.4");
             });
  // The client commands (service_admin.hpp); the shell's command decides
  // the role a token needs (status looks, kill steers).
  auto admin = std::make_shared<admin_context>();
  admin->svc = &service_;
  admin->started = std::chrono::steady_clock::now();
  admin_ = admin;
  server.Post("/admin/shell", [this, admin](const httplib::Request& req,
                                            httplib::Response& res) {
    const auto command = req.get_param_value("command");
    if (!admitted(access_, req, res, command))
      return;
    send_admin(res, admin_shell(*admin, command, req.get_param_value("args")));
  });
  server.Post("/admin/chaos", [this, admin](const httplib::Request& req,
                                            httplib::Response& res) {
    if (!admitted(access_, req, res, "chaos"))
      return;
    const auto rank = tutti::whole_number(req.get_param_value("rank"));
    if (!rank)
      return send_admin(
        res, {400, R"({"ok":false,"error":"--rank must be a whole number"})"});
    send_admin(res, admin_chaos(*admin, req.get_param_value("fault"), *rank));
  });

  server.Get("/v1/models", [this, created](const httplib::Request&,
                                           httplib::Response& res) {
    res.set_content(models_body(service_.model(), created), json_type);
  });

  server.Post("/v1/completions", [this](const httplib::Request& req,
                                        httplib::Response& res) {
    if (!service_.ready())
      return send_error(res, 503, "the model is not ready",
                        "service_unavailable");
    thread_local std::mt19937_64 seeds(std::random_device{}());
    auto parsed = parse_completion(req.body, service_.model(), seeds());
    if (parsed.http_status != 0) {
      service_.metrics().rejected("invalid");
      return send_error(res, parsed.http_status, parsed.message,
                        "invalid_request_error", parsed.param);
    }
    const int64_t prompt_tokens = static_cast<int64_t>(
      parsed.req->prompt.size());
    auto sub = service_.submit(std::move(parsed.req));
    if (sub.refused.http_status != 0) {
      if (sub.refused.http_status == 429)
        res.set_header("Retry-After", "1");
      return send_error(res, sub.refused.http_status, sub.refused.message,
                        sub.refused.type, sub.refused.param);
    }
    const auto cmpl_id = "cmpl-" + std::to_string(sub.id);
    const int64_t now = unix_now();
    if (!parsed.options.stream) {
      completion_result result;
      result.prompt_tokens = prompt_tokens;
      request_event ev;
      while (result.finish == finish_reason::none) {
        if (!sub.stream->next(ev, std::chrono::seconds(1)))
          continue; // the service's deadline ends every request
        result.tokens.insert(result.tokens.end(), ev.tokens.begin(),
                             ev.tokens.end());
        result.finish = ev.finish;
        if (ev.finish != finish_reason::none) {
          int status = 0;
          std::string type;
          if (failed(ev.finish, status, type))
            return send_error(res, status,
                              ev.error.empty() ? finish_reason_name(ev.finish)
                                               : ev.error,
                              type);
        }
      }
      res.set_content(completion_body(cmpl_id, parsed.options.model, now,
                                      result, parsed.options,
                                      &service_.model()),
                      json_type);
      return;
    }
    auto st = std::make_shared<stream_state>();
    st->svc = &service_;
    st->id = sub.id;
    st->events = sub.stream;
    st->cmpl_id = cmpl_id;
    st->model = parsed.options.model;
    st->created = now;
    st->options = parsed.options;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        request_event ev;
        if (!st->events->next(ev, std::chrono::seconds(1))) {
          // A comment line keeps proxies patient and finds a client that
          // went away while the request waits.
          return sink.write(": waiting\n\n", 11);
        }
        std::string out;
        int status = 0;
        std::string type;
        if (ev.finish != finish_reason::none
            && failed(ev.finish, status, type)) {
          out = "data: "
                + error_body(ev.error.empty() ? finish_reason_name(ev.finish)
                                              : ev.error,
                             type)
                + "\n\n";
        } else if (!ev.tokens.empty() || ev.finish != finish_reason::none) {
          out = stream_chunk(st->cmpl_id, st->model, st->created, ev.tokens,
                             st->offset, ev.finish, st->options,
                             &st->svc->model());
          for (const auto& t : ev.tokens)
            st->offset += static_cast<int64_t>(
              token_text(&st->svc->model(), t.token).size());
        }
        if (ev.finish != finish_reason::none) {
          st->finished = true;
          out += "data: [DONE]\n\n";
        }
        if (!out.empty() && !sink.write(out.data(), out.size()))
          return false;
        if (st->finished)
          sink.done();
        return true;
      },
      [st](bool) {
        // Ended before its last event: the client is gone.
        if (!st->finished)
          st->svc->cancel(st->id);
      });
  });
}

} // namespace tutti::serve
