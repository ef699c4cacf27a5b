#include "tutti/serve/http_front.hpp"

#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "serve_dashboard.hpp"
#include "tutti/base/whole_number.hpp"
#include "tutti/dashboard/dashboard.hpp"
#include "tutti/security/web_config.hpp"
#include "tutti/serve/api_auth.hpp"
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

void send_error(net::http_response& res, int status, const std::string& message,
                const std::string& type, const std::string& param = {}) {
  res.status = status;
  // A replica not ready now may be soon (an expert tier restarting):
  // clients and the gateway retry, elsewhere first.
  if (status == 503)
    res.set_header("Retry-After", "1");
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
bool on_this_machine(const net::http_request& req) {
  return security::is_loopback_address(req.remote_addr)
         || (!req.remote_addr.empty() && req.remote_addr == req.local_addr);
}

// True to go on; else `res` holds the refusal (401 or 403, one line).
bool admitted(const security::admin_access& access,
              const net::http_request& req, net::http_response& res,
              const std::string& action) {
  const auto a = access.admit(on_this_machine(req), req.remote_addr,
                              req.header("Authorization"), action);
  if (a.admitted())
    return true;
  if (a.http_status == 401)
    res.set_header("WWW-Authenticate", "Bearer");
  send_error(res, a.http_status, a.message, a.type);
  return false;
}

void send_admin(net::http_response& res, const admin_answer& a) {
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
                       std::unique_ptr<net::http_server> server)
  : service_(svc), cfg_(cfg), server_(std::move(server)) {}

namespace {

// Every connection waits on its request: one thread each for as many as
// may be running and queued, and a few more to answer 429s and probes.
// HTTPS where serve.metrics_web_config has a tls_server_config.
expected<net::server_options> front_options(const serve_config& cfg) {
  net::server_options o;
  o.host = cfg.host;
  o.port = static_cast<uint16_t>(cfg.port);
  o.threads = static_cast<size_t>(cfg.http_threads > 0
                                    ? cfg.http_threads
                                    : cfg.limits.batch.max_sequences
                                        + cfg.limits.max_queue + 8);
  o.max_body_bytes = static_cast<size_t>(cfg.max_body_bytes);
  o.head_timeout = o.read_timeout = o.write_timeout = std::chrono::seconds(30);
  if (!cfg.metrics_web_config.empty()) {
    auto web = security::load_web_config(cfg.metrics_web_config);
    if (!web)
      return web.error().with_context("serve.metrics_web_config: ");
    o.tls = *web;
  }
  return o;
}

} // namespace

http_front::~http_front() { stop(); }

void http_front::stop() {
  if (server_)
    server_->stop();
}

expected<std::unique_ptr<http_front>> http_front::start(
  service& svc, const serve_config& cfg) {
  auto options = front_options(cfg);
  if (!options)
    return options.error();
  std::unique_ptr<http_front> f(new http_front(
    svc, cfg, std::make_unique<net::http_server>(std::move(*options))));
  auto access = security::admin_access::open(cfg.admin_policy,
                                             "serve.admin_policy");
  if (!access)
    return access.error();
  f->access_ = std::move(*access);
  f->routes();
  TUTTI_RETURN_IF_ERROR(install_api_auth(*f->server_, cfg));
  TUTTI_RETURN_IF_ERROR(f->server_->start());
  f->tls_ = f->server_->tls();
  f->port_ = f->server_->port();
  f->admin_->address = cfg.host + ":" + std::to_string(f->port_);
  return f;
}

void http_front::routes() {
  auto& server = *server_;
  const int64_t created = unix_now();

  server.set_error_page([](const net::http_request&, net::http_response& res) {
    if (res.status == 413)
      send_error(res, 413, "the request body is over the limit",
                 "invalid_request_error");
    else if (res.status == 404)
      send_error(res, 404, "no such path", "invalid_request_error");
    else
      send_error(res, res.status, "request failed", "invalid_request_error");
  });

  // Liveness: a replica whose expert tier gave up is dead to its probes.
  server.get("/health",
             [this](const net::http_request&, net::http_response& res) {
               const auto failure = service_.failure();
               if (failure.empty()) {
                 res.set_content(R"({"status":"ok"})", json_type);
                 return;
               }
               res.status = 503;
               res.set_content(nlohmann::json{{"status", "failed"},
                                              {"reason", failure}}
                                 .dump(),
                               json_type);
             });
  server.get(
    "/ready", [this](const net::http_request&, net::http_response& res) {
      if (service_.shards_up())
        res.set_content(R"({"status":"ready"})", json_type);
      else
        send_error(res, 503, "the model is not ready", "service_unavailable");
    });
  server.get("/metrics",
             [this](const net::http_request&, net::http_response& res) {
               res.set_content(service_.metrics().render(service_.model().name),
                               "text/plain; version=0.0.4");
             });
  // Read-only, behind /metrics' basic auth (api_auth.cpp).
  dashboard::add_routes(server, serve_dashboard(service_, cfg_));
  // The client commands (service_admin.hpp); the shell's command decides
  // the role a token needs (status looks, kill steers).
  auto admin = std::make_shared<admin_context>();
  admin->svc = &service_;
  admin->started = std::chrono::steady_clock::now();
  admin_ = admin;
  server.post("/admin/shell", [this, admin](const net::http_request& req,
                                            net::http_response& res) {
    const auto command = req.param("command");
    if (!admitted(access_, req, res, command))
      return;
    send_admin(res, admin_shell(*admin, command, req.param("args")));
  });
  server.post("/admin/chaos", [this, admin](const net::http_request& req,
                                            net::http_response& res) {
    if (!admitted(access_, req, res, "chaos"))
      return;
    const auto rank = tutti::whole_number(req.param("rank"));
    if (!rank)
      return send_admin(
        res, {400, R"({"ok":false,"error":"--rank must be a whole number"})"});
    send_admin(res, admin_chaos(*admin, req.param("fault"), *rank));
  });

  server.get("/v1/models", [this, created](const net::http_request&,
                                           net::http_response& res) {
    res.set_content(models_body(service_.model(), created), json_type);
  });

  server.post("/v1/completions",
              [this](const net::http_request& req, net::http_response& res) {
                answer(req, res, parse_completion);
              });
  server.post("/v1/chat/completions",
              [this](const net::http_request& req, net::http_response& res) {
                answer(req, res, parse_chat);
              });
}

// Completions and chat completions alike: parse, submit, then one body or
// a stream of server-sent events.
void http_front::answer(const net::http_request& req, net::http_response& res,
                        parse_fn parse) {
  if (!service_.ready())
    return send_error(res, 503, "the model is not ready",
                      "service_unavailable");
  thread_local std::mt19937_64 seeds(std::random_device{}());
  auto parsed = parse(req.body, service_.model(), seeds());
  if (parsed.http_status != 0) {
    service_.metrics().rejected("invalid");
    return send_error(res, parsed.http_status, parsed.message,
                      "invalid_request_error", parsed.param);
  }
  const int64_t prompt_tokens = static_cast<int64_t>(parsed.req->prompt.size());
  auto sub = service_.submit(std::move(parsed.req));
  if (sub.refused.http_status != 0) {
    if (sub.refused.http_status == 429)
      res.set_header("Retry-After", "1");
    return send_error(res, sub.refused.http_status, sub.refused.message,
                      sub.refused.type, sub.refused.param);
  }
  const auto cmpl_id = (parsed.options.chat ? "chatcmpl-" : "cmpl-")
                       + std::to_string(sub.id);
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
          return send_error(
            res, status,
            ev.error.empty() ? finish_reason_name(ev.finish) : ev.error, type);
      }
    }
    res.set_content(completion_body(cmpl_id, parsed.options.model, now, result,
                                    parsed.options, &service_.model()),
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
  res.stream(
    "text/event-stream",
    [st](net::chunk_sink& sink) {
      request_event ev;
      if (!st->events->next(ev, std::chrono::seconds(1))) {
        // A comment line keeps proxies patient and finds a client that
        // went away while the request waits.
        return sink.write(": waiting\n\n", 11);
      }
      std::string out;
      int status = 0;
      std::string type;
      if (ev.finish != finish_reason::none && failed(ev.finish, status, type)) {
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
}

} // namespace tutti::serve
