#include "tutti/net/http_server.hpp"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <regex>
#include <thread>

#include "connection.hpp"
#include "connection_registry.hpp"
#include "httplib_adapt.hpp"
#include "listen_address.hpp"

namespace tutti::net {

namespace {

std::string regex_escaped(const std::string& path) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(path, special, R"(\$&)");
}

constexpr const char* plain_text = "text/plain; charset=utf-8";

const char* reason_phrase(int status) {
  switch (status) {
  case 400:
    return "Bad Request";
  case 413:
    return "Payload Too Large";
  case 431:
    return "Request Header Fields Too Large";
  default:
    return "Error";
  }
}

} // namespace

struct http_server::impl {
  // cpp-httplib's server with its connection handling replaced: each
  // connection is served by serve() (connection.hpp reads the heads and
  // carries the bytes), cpp-httplib parses and routes each request.
  class engine : public httplib::Server {
  public:
    explicit engine(impl& owner) : owner_(owner) {}

  private:
    bool process_and_close_socket(socket_t fd) override {
      if (owner_.connections.enter(fd)) {
        serve(fd);
        owner_.connections.leave(fd);
      }
      ::close(fd);
      return true;
    }
    void serve(int fd);

    impl& owner_;
  };

  explicit impl(server_options o) : options(std::move(o)), server(*this) {}
  std::string bad_request(detail::head_read why) const;

  server_options options;
  std::vector<guard> guards;
  error_page page;
  handler fallback;
  std::shared_ptr<SSL_CTX> tls_context;
  detail::connection_registry connections;
  engine server;
  std::thread thread;
  std::atomic<bool> thread_ended{false};
  uint16_t port = 0;
};

void http_server::impl::engine::serve(int fd) {
  const auto& o = owner_.options;
  // A streamed answer writes an event at a time: each goes out when
  // written, not held back for the client's acknowledgement of the last.
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::unique_ptr<security::tls_stream> tls;
  if (owner_.tls_context) {
    auto accepted = security::tls_stream::accept_web_client(owner_.tls_context,
                                                            fd, o.head_timeout);
    if (!accepted)
      return; // plaintext, another CA, an old TLS version: no HTTP to say
    tls = std::move(*accepted);
  }
  detail::connection conn(fd, std::move(tls),
                          {o.read_timeout, o.write_timeout});
  // A request must begin within the keep-alive wait (the first one too:
  // a client that connects and says nothing holds a thread no longer).
  const auto first_byte = std::min(o.keep_alive_timeout, o.head_timeout);
  for (size_t served = 0;;) {
    const auto head = conn.read_head(first_byte, o.head_timeout,
                                     o.max_head_bytes);
    if (!owner_.connections.busy(fd) || head == detail::head_read::incomplete)
      return;
    if (head != detail::head_read::complete) {
      conn.send_all(owner_.bad_request(head));
      return conn.finish();
    }
    ++served;
    const bool last = served >= o.requests_per_connection;
    bool client_closes = false;
    if (!process_request(conn, last, client_closes, nullptr) || last
        || client_closes || !owner_.connections.idle(fd))
      return conn.finish();
  }
}

// The 400 for a head cpp-httplib never sees, in the part's error shape
// when it has one.
std::string http_server::impl::bad_request(detail::head_read why) const {
  http_response res;
  res.status = 400;
  if (page)
    page(http_request{}, res);
  if (res.empty())
    res.set_content(why == detail::head_read::too_large
                      ? "request head too large\n"
                      : "bad request\n",
                    plain_text);
  std::string out = "HTTP/1.1 " + std::to_string(res.status) + " "
                    + reason_phrase(res.status)
                    + "\r\nContent-Type: " + res.content_type
                    + "\r\nContent-Length: " + std::to_string(res.body.size())
                    + "\r\nConnection: close\r\n";
  for (const auto& [name, value] : res.headers)
    out += name + ": " + value + "\r\n";
  return out + "\r\n" + res.body;
}

http_server::http_server(server_options options)
  : impl_(std::make_unique<impl>(std::move(options))) {}

http_server::~http_server() { stop(); }

namespace {

httplib::Server::Handler adapted(handler h) {
  return
    [h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
      http_response out;
      h(detail::request_of(req), out);
      detail::put_response(std::move(out), res);
    };
}

} // namespace

void http_server::get(const std::string& path, handler h) {
  impl_->server.Get(regex_escaped(path), adapted(std::move(h)));
}

void http_server::post(const std::string& path, handler h) {
  impl_->server.Post(regex_escaped(path), adapted(std::move(h)));
}

void http_server::fallback(handler h) { impl_->fallback = std::move(h); }
void http_server::add_guard(guard g) { impl_->guards.push_back(std::move(g)); }
void http_server::set_error_page(error_page page) {
  impl_->page = std::move(page);
}

status http_server::start() {
  auto& p = *impl_;
  auto& server = p.server;
  const auto& o = p.options;
  const auto where = detail::host_port(o.host, o.port);
  if (o.tls.tls()) {
    auto context = security::server_tls_context(o.tls);
    if (!context)
      return status::error("cannot serve TLS on " + where + ": "
                           + context.message());
    p.tls_context = *context;
  }
  if (p.fallback) {
    // After the routes: cpp-httplib tries handlers in the order added.
    auto any = adapted(p.fallback);
    server.Get(".*", any).Post(".*", any).Put(".*", any).Patch(".*", any);
    server.Delete(".*", any).Options(".*", any);
  }
  if (!p.guards.empty())
    server.set_pre_routing_handler(
      [&p](const httplib::Request& req, httplib::Response& res) {
        const auto head = detail::request_of(req); // no body read yet
        for (const auto& g : p.guards) {
          http_response refusal;
          if (g(head, refusal)) {
            detail::put_response(std::move(refusal), res);
            return httplib::Server::HandlerResponse::Handled;
          }
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  if (p.page)
    server.set_error_handler(httplib::Server::HandlerWithResponse(
      [&p](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty())
          return httplib::Server::HandlerResponse::Unhandled;
        auto filled = detail::response_of(res);
        p.page(detail::request_of(req), filled);
        detail::put_response(std::move(filled), res);
        return httplib::Server::HandlerResponse::Handled;
      }));
  const size_t threads = std::max<size_t>(o.threads, 1);
  server.new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  if (o.max_body_bytes > 0)
    server.set_payload_max_length(o.max_body_bytes);
  // For the Keep-Alive header cpp-httplib writes; serve() enforces both.
  server.set_keep_alive_max_count(
    std::max<size_t>(o.requests_per_connection, 1));
  server.set_keep_alive_timeout(
    std::chrono::duration_cast<std::chrono::seconds>(o.keep_alive_timeout)
      .count());
  // SO_REUSEADDR (a restart may bind while old connections linger), not
  // cpp-httplib's SO_REUSEPORT, which would let a second server share the
  // port instead of failing.
  int listen_fd = -1;
  server.set_socket_options([&listen_fd](socket_t fd) {
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    listen_fd = fd;
  });
  const int bound = o.port == 0 ? server.bind_to_any_port(o.host)
                    : server.bind_to_port(o.host, o.port) ? o.port
                                                          : -1;
  if (bound <= 0)
    return status::error("cannot listen on " + where + ": "
                         + detail::bind_failure(o.host, o.port));
  // cpp-httplib listens with a backlog of 5: a burst of clients (a load
  // generator's first wave) would overflow it and see resets.
  if (::listen(listen_fd, SOMAXCONN) != 0)
    return status::error("cannot listen on " + where + ": "
                         + std::strerror(errno));
  p.port = static_cast<uint16_t>(bound);
  p.thread = std::thread([&p] {
    p.server.listen_after_bind();
    p.thread_ended = true;
  });
  // stop() before the thread runs would find nothing to stop, and the
  // thread would then wait in accept() for ever.
  while (!server.is_running() && !p.thread_ended)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return {};
}

void http_server::stop() {
  auto& p = *impl_;
  p.connections.stop();
  p.server.stop();
  if (p.thread.joinable())
    p.thread.join();
}

uint16_t http_server::port() const { return impl_->port; }
bool http_server::tls() const { return impl_->tls_context != nullptr; }

} // namespace tutti::net
