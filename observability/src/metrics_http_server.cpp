#include "tutti/observability/metrics_http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <string_view>
#include <system_error>
#include <utility>

namespace tutti::observability {
namespace {

using steady = std::chrono::steady_clock;

constexpr std::size_t max_request_head = 8 * 1024;
constexpr auto request_head_deadline = std::chrono::seconds(2);
constexpr auto response_write_deadline = std::chrono::seconds(5);
// After answering, read and discard what the client still sends for a short
// while: closing a socket with unread input makes the kernel send a reset,
// which can destroy the response before the client reads it.
constexpr auto linger_deadline = std::chrono::milliseconds(250);
constexpr std::size_t linger_max_bytes = 64 * 1024;

constexpr const char* metrics_content_type =
  "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* plain_content_type = "text/plain; charset=utf-8";

std::string host_port(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos)
    return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

void close_fd(int& fd) {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
}

int remaining_ms(steady::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - steady::now())
                .count();
  return left < 0 ? 0 : static_cast<int>(left);
}

enum class wait_result { ready, timed_out, stopping, failed };

// Waits for `events` on fd until the deadline or until the stop pipe fires.
wait_result wait_for(int fd, short events, int stop_fd,
                     steady::time_point deadline) {
  for (;;) {
    pollfd fds[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    int timeout = remaining_ms(deadline);
    int n = ::poll(fds, 2, timeout);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return wait_result::failed;
    }
    if (fds[1].revents != 0)
      return wait_result::stopping;
    if (fds[0].revents != 0)
      return wait_result::
        ready; // includes POLLHUP/POLLERR: the read/write reports it
    if (timeout == 0)
      return wait_result::timed_out;
  }
}

// --- request parsing -------------------------------------------------------

struct request_line {
  std::string method;
  std::string path; // without query string or fragment
};

bool is_token_char(char c) {
  // RFC 9110 tchar
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
         || (c >= '0' && c <= '9')
         || std::string_view("!#$%&'*+-.^_`|~").find(c)
              != std::string_view::npos;
}

bool is_visible_ascii(char c) { return c > 0x20 && c < 0x7f; }

// Parses "METHOD SP target SP HTTP/1.x"; false when malformed.
bool parse_request_line(std::string_view line, request_line& out) {
  auto first_space = line.find(' ');
  if (first_space == std::string_view::npos || first_space == 0)
    return false;
  auto second_space = line.find(' ', first_space + 1);
  if (second_space == std::string_view::npos)
    return false;
  std::string_view method = line.substr(0, first_space);
  std::string_view target = line.substr(first_space + 1,
                                        second_space - first_space - 1);
  std::string_view version = line.substr(second_space + 1);
  for (char c : method)
    if (!is_token_char(c))
      return false;
  if (target.empty() || target[0] != '/')
    return false;
  for (char c : target)
    if (!is_visible_ascii(c))
      return false;
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1."
      || version[7] < '0' || version[7] > '9')
    return false;
  out.method = std::string(method);
  out.path = std::string(target.substr(0, target.find_first_of("?#")));
  return true;
}

// Header lines are not used, but each must at least look like "name: value".
bool header_lines_well_formed(std::string_view headers) {
  while (!headers.empty()) {
    auto end = headers.find('\n');
    std::string_view line = headers.substr(0, end);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return false;
    for (char c : line.substr(0, colon))
      if (!is_token_char(c))
        return false;
    if (end == std::string_view::npos)
      break;
    headers.remove_prefix(end + 1);
  }
  return true;
}

// --- responses -------------------------------------------------------------

std::string make_response(const char* status, const char* content_type,
                          const std::string& body,
                          const char* extra_headers = "") {
  std::string out = "HTTP/1.1 ";
  out += status;
  out += "\r\nContent-Type: ";
  out += content_type;
  out += "\r\nContent-Length: " + std::to_string(body.size());
  out += "\r\nConnection: close\r\n";
  out += extra_headers;
  out += "\r\n";
  out += body;
  return out;
}

// --- socket I/O ------------------------------------------------------------

enum class head_result { complete, too_large, incomplete };

// Position and length of the blank line that ends the request head, or npos.
// A bare "\n\n" counts too: some hand-written clients send it.
std::pair<std::size_t, std::size_t> find_head_end(const std::string& head) {
  std::size_t crlf = head.find("\r\n\r\n");
  std::size_t lf = head.find("\n\n");
  if (lf < crlf)
    return {lf, 2};
  return {crlf, 4};
}

// Reads until the blank line that ends the request head. `incomplete` covers
// deadline, peer close, errors and stop: there is nobody worth answering.
head_result read_request_head(int fd, int stop_fd, std::string& head) {
  const auto deadline = steady::now() + request_head_deadline;
  char buf[2048];
  for (;;) {
    if (auto end = find_head_end(head); end.first != std::string::npos)
      return end.first + end.second <= max_request_head
               ? head_result::complete
               : head_result::too_large;
    if (head.size() > max_request_head)
      return head_result::too_large;
    if (wait_for(fd, POLLIN, stop_fd, deadline) != wait_result::ready)
      return head_result::incomplete;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
      continue;
    if (n <= 0)
      return head_result::incomplete;
    head.append(buf, static_cast<std::size_t>(n));
  }
}

void write_all(int fd, int stop_fd, const std::string& data) {
  const auto deadline = steady::now() + response_write_deadline;
  std::size_t sent = 0;
  while (sent < data.size()) {
    if (wait_for(fd, POLLOUT, stop_fd, deadline) != wait_result::ready)
      return;
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent,
                       MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
      continue;
    if (n <= 0)
      return;
    sent += static_cast<std::size_t>(n);
  }
}

void drain_before_close(int fd, int stop_fd) {
  ::shutdown(fd, SHUT_WR);
  const auto deadline = steady::now() + linger_deadline;
  std::size_t discarded = 0;
  char buf[2048];
  while (discarded < linger_max_bytes) {
    if (wait_for(fd, POLLIN, stop_fd, deadline) != wait_result::ready)
      return;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
      continue;
    if (n <= 0)
      return;
    discarded += static_cast<std::size_t>(n);
  }
}

std::string build_response(const std::string& head,
                           const std::function<std::string()>& render) {
  auto line_end = head.find('\n');
  std::string_view line(head.data(), line_end);
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  auto head_end = find_head_end(head).first;
  std::string_view headers(head.data() + line_end + 1,
                           head_end > line_end ? head_end - line_end - 1 : 0);

  request_line request;
  if (!parse_request_line(line, request) || !header_lines_well_formed(headers))
    return make_response("400 Bad Request", plain_content_type,
                         "bad request\n");
  if (request.method != "GET")
    return make_response("405 Method Not Allowed", plain_content_type,
                         "only GET is supported\n", "Allow: GET\r\n");
  if (request.path == "/metrics") {
    std::string body;
    try {
      body = render();
    } catch (const std::exception& e) {
      return make_response("500 Internal Server Error", plain_content_type,
                           std::string("rendering metrics failed: ") + e.what()
                             + "\n");
    } catch (...) {
      return make_response("500 Internal Server Error", plain_content_type,
                           "rendering metrics failed\n");
    }
    return make_response("200 OK", metrics_content_type, body);
  }
  if (request.path == "/")
    return make_response("200 OK", plain_content_type,
                         "tutti metrics exporter: scrape /metrics\n");
  return make_response("404 Not Found", plain_content_type,
                       "not found; metrics are at /metrics\n");
}

} // namespace

// --- server ----------------------------------------------------------------

expected<std::unique_ptr<metrics_http_server>> metrics_http_server::start(
  const std::string& host, uint16_t port, std::function<std::string()> render) {
  std::string error;
  const std::string where = host_port(host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  const std::string port_text = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(),
                         port_text.c_str(), &hints, &addresses);
  if (rc != 0) {
    error = "metrics server: cannot resolve " + where + ": "
            + (rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc));
    return status::error(error);
  }

  // Bind the first address that works; remember the last failure for the message.
  int listen_fd = -1;
  std::string failure = "no usable address";
  for (addrinfo* a = addresses; a != nullptr && listen_fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family,
                      a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                      a->ai_protocol);
    if (fd < 0) {
      failure = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      failure = std::string("bind: ") + std::strerror(errno);
      ::close(fd);
      continue;
    }
    if (::listen(fd, 16) != 0) {
      failure = std::string("listen: ") + std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd = fd;
  }
  ::freeaddrinfo(addresses);
  if (listen_fd < 0) {
    error = "metrics server: cannot listen on " + where + ": " + failure;
    return status::error(error);
  }

  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  if (::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &bound_len)
      != 0) {
    error = "metrics server: getsockname on " + where + ": "
            + std::strerror(errno);
    ::close(listen_fd);
    return status::error(error);
  }
  uint16_t bound_port =
    bound.ss_family == AF_INET6
      ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  int stop_pipe[2];
  if (::pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    error = "metrics server on " + where + ": pipe: " + std::strerror(errno);
    ::close(listen_fd);
    return status::error(error);
  }

  std::unique_ptr<metrics_http_server> server(new metrics_http_server(
    listen_fd, stop_pipe[0], stop_pipe[1], bound_port, std::move(render)));
  try {
    server->thread_ = std::thread([s = server.get()] { s->serve(); });
  } catch (const std::system_error& e) {
    error = "metrics server on " + where + ": cannot start thread: " + e.what();
    return status::error(
      error); // the destructor closes the descriptors; no thread to join
  }
  return server;
}

metrics_http_server::metrics_http_server(int listen_fd, int stop_read_fd,
                                         int stop_write_fd, uint16_t port,
                                         std::function<std::string()> render)
  : listen_fd_(listen_fd), stop_read_fd_(stop_read_fd),
    stop_write_fd_(stop_write_fd), port_(port), render_(std::move(render)) {}

metrics_http_server::~metrics_http_server() {
  if (thread_.joinable()) {
    char byte = 1;
    // The pipe is never drained, so one byte keeps every later wait awake too.
    while (::write(stop_write_fd_, &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  close_fd(listen_fd_);
  close_fd(stop_read_fd_);
  close_fd(stop_write_fd_);
}

void metrics_http_server::serve() noexcept {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_read_fd_, POLLIN, 0}};
    int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return; // poll itself broken: nothing sensible left to do
    }
    if (fds[1].revents != 0)
      return;
    if (fds[0].revents == 0)
      continue;

    int fd = ::accept4(listen_fd_, nullptr, nullptr,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors or memory: the listening socket stays readable, so
      // back off instead of spinning; the stop pipe still ends the wait.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS
          || errno == ENOMEM) {
        pollfd stop = {stop_read_fd_, POLLIN, 0};
        if (::poll(&stop, 1, 100) > 0)
          return;
      }
      continue; // EAGAIN, ECONNABORTED, EINTR, ...: the next client may be fine
    }
    try {
      handle_connection(fd);
    } catch (...) {
      // Only allocation failures can get here; drop this client, keep serving.
    }
    ::close(fd);
  }
}

void metrics_http_server::handle_connection(int fd) {
  std::string head;
  switch (read_request_head(fd, stop_read_fd_, head)) {
  case head_result::incomplete:
    return;
  case head_result::too_large:
    write_all(fd, stop_read_fd_,
              make_response("400 Bad Request", plain_content_type,
                            "request head too large\n"));
    break;
  case head_result::complete:
    write_all(fd, stop_read_fd_, build_response(head, render_));
    break;
  }
  drain_before_close(fd, stop_read_fd_);
}

} // namespace tutti::observability
