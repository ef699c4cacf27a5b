// net's metrics endpoint (a daemon's /metrics) with good and bad clients,
// spoken to byte by byte: the routes, statuses and headers a scraper sees,
// and what garbage, half-open connections, silent and slowloris clients
// cost; stopping, and bind failures as values.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "tutti/net/metrics_endpoint.hpp"
#include "tutti/observability/prometheus_text.hpp"

using namespace tutti::net;
using tutti::observability::prometheus_text;
using steady = std::chrono::steady_clock;

namespace {

double seconds_since(steady::time_point start) {
  return std::chrono::duration<double>(steady::now() - start).count();
}

// A text with labels that need escaping, a counter and special values.
std::string realistic_text() {
  prometheus_text t;
  t.family("tutti_step_loss", "gauge", "Training loss of the last step.");
  t.family("tutti_tokens_total", "counter", "Tokens processed since start.");
  t.sample("tutti_step_loss", {}, 2.345678901234);
  t.sample("tutti_tokens_total", {{"rank", "0"}}, 1e9);
  t.family("tutti_grad_norm", "gauge", "Gradient norm, \"pre-clip\".");
  t.sample("tutti_grad_norm",
           {{"note", "quote \" backslash \\ newline \n end"}},
           std::numeric_limits<double>::quiet_NaN());
  return t.str();
}

// --- raw HTTP client ---------------------------------------------------------

int connect_local(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  timeval tv{5, 0}; // a hung server fails the test instead of hanging it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_all(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent,
                       MSG_NOSIGNAL);
    if (n <= 0)
      return; // the server may hang up on bad input; that is allowed
    sent += static_cast<std::size_t>(n);
  }
}

std::string read_until_close(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// Sends raw bytes, returns everything the server wrote before closing.
std::string http_exchange(uint16_t port, const std::string& request) {
  int fd = connect_local(port);
  send_all(fd, request);
  std::string response = read_until_close(fd);
  ::close(fd);
  return response;
}

std::string get(uint16_t port, const std::string& target) {
  return http_exchange(
    port, "GET " + target
            + " HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: test\r\n\r\n");
}

int status_code(const std::string& response) {
  if (response.compare(0, 9, "HTTP/1.1 ") != 0 || response.size() < 12)
    return -1;
  return std::stoi(response.substr(9, 3));
}

std::string body_of(const std::string& response) {
  auto pos = response.find("\r\n\r\n");
  return pos == std::string::npos ? std::string() : response.substr(pos + 4);
}

bool has_header(const std::string& response, const std::string& line) {
  std::string head = response.substr(0, response.find("\r\n\r\n")) + "\r\n";
  return head.find("\r\n" + line + "\r\n") != std::string::npos;
}

std::unique_ptr<metrics_endpoint> start_test_server(
  std::function<std::string()> render) {
  auto server = metrics_endpoint::start("127.0.0.1", 0, std::move(render));
  INFO(server.message());
  REQUIRE(server.ok());
  REQUIRE(*server != nullptr);
  REQUIRE((*server)->port() != 0);
  return std::move(*server);
}

} // namespace

TEST_CASE("metrics_endpoint serves /metrics and answers other requests",
          "[net][metrics]") {
  const std::string text = realistic_text();
  auto server = start_test_server([&] { return text; });
  const uint16_t port = server->port();

  SECTION("GET /metrics returns the rendered text") {
    std::string response = get(port, "/metrics");
    INFO(response);
    CHECK(status_code(response) == 200);
    CHECK(has_header(response,
                     "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
    CHECK(
      has_header(response, "Content-Length: " + std::to_string(text.size())));
    CHECK(has_header(response, "Connection: close"));
    CHECK(body_of(response) == text);
  }
  SECTION("a query string is ignored") {
    CHECK(status_code(get(port, "/metrics?name[]=x")) == 200);
  }
  SECTION("GET / points at /metrics") {
    std::string response = get(port, "/");
    CHECK(status_code(response) == 200);
    CHECK(body_of(response).find("/metrics") != std::string::npos);
  }
  SECTION("unknown paths are 404") {
    CHECK(status_code(get(port, "/nope")) == 404);
    CHECK(status_code(get(port, "/metricsx")) == 404);
  }
  SECTION("other methods are 405") {
    CHECK(status_code(http_exchange(
            port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"))
          == 405);
    CHECK(status_code(http_exchange(port, "DELETE / HTTP/1.0\r\n\r\n")) == 405);
  }
  SECTION("malformed request lines are 400") {
    CHECK(status_code(http_exchange(port, "GET /metrics\r\n\r\n")) == 400);
    CHECK(status_code(http_exchange(port, "GET metrics HTTP/1.1\r\n\r\n"))
          == 400);
    CHECK(status_code(http_exchange(port, "GET /metrics SPDY/3\r\n\r\n"))
          == 400);
    CHECK(status_code(http_exchange(
            port, "GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n"))
          == 400);
  }
  SECTION("an oversized request head is 400") {
    std::string huge = "GET /metrics HTTP/1.1\r\nX-Padding: "
                       + std::string(9000, 'a') + "\r\n\r\n";
    CHECK(status_code(http_exchange(port, huge)) == 400);
  }
}

TEST_CASE("metrics_endpoint survives bad clients", "[net][metrics]") {
  auto server = start_test_server([] { return std::string("up 1\n"); });
  const uint16_t port = server->port();

  SECTION("garbage bytes get 400 or a closed connection; the next request is "
          "served") {
    std::string garbage;
    for (int i = 0; i < 3000; ++i)
      garbage += static_cast<char>((i * 7919) % 256);
    garbage += "\r\n\r\n";
    std::string response = http_exchange(port, garbage);
    INFO(response);
    CHECK((response.empty() || status_code(response) == 400));
    CHECK(status_code(http_exchange(port, std::string("\0\0\0\0\n\n", 6)))
          == 400);
    CHECK(body_of(get(port, "/metrics")) == "up 1\n");
  }
  SECTION("a half-open connection is dropped and the next request is served") {
    int fd = connect_local(port);
    send_all(fd, "GET /metr");
    ::shutdown(fd, SHUT_WR);
    CHECK(read_until_close(fd).empty());
    ::close(fd);
    CHECK(status_code(get(port, "/metrics")) == 200);
  }
  SECTION("a silent client delays the next one by at most the read deadline") {
    int silent = connect_local(port);
    std::this_thread::sleep_for(
      std::chrono::milliseconds(50)); // let the server pick it up first
    auto start = steady::now();
    std::string response = get(port, "/metrics");
    double waited = seconds_since(start);
    INFO("waited " << waited << " s");
    CHECK(status_code(response) == 200);
    CHECK(waited < 2.5);
    ::close(silent);
  }
  SECTION("a slowloris client is cut off at the read deadline") {
    int slow = connect_local(port);
    auto start = steady::now();
    std::string request = "GET /metrics HTTP/1.1\r\nX-Slow: ";
    bool cut_off = false;
    for (std::size_t i = 0; i < 40 && !cut_off;
         ++i) { // one byte per 100 ms: 4 s if never cut
      if (::send(slow, &request[i % request.size()], 1, MSG_NOSIGNAL) != 1)
        cut_off = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      char byte;
      if (::recv(slow, &byte, 1, MSG_DONTWAIT) == 0)
        cut_off = true;
    }
    double held = seconds_since(start);
    INFO("held " << held << " s");
    CHECK(cut_off);
    CHECK(held < 2.6);
    ::close(slow);
    CHECK(status_code(get(port, "/metrics")) == 200);
  }
}

TEST_CASE("metrics_endpoint turns a throwing render into 500",
          "[net][metrics]") {
  bool fail = true;
  auto server = start_test_server([&]() -> std::string {
    if (fail)
      throw std::runtime_error("store unavailable");
    return "up 1\n";
  });
  std::string response = get(server->port(), "/metrics");
  CHECK(status_code(response) == 500);
  CHECK(body_of(response).find("store unavailable") != std::string::npos);
  fail = false;
  CHECK(status_code(get(server->port(), "/metrics")) == 200);
}

TEST_CASE(
  "metrics_endpoint stops within a second, even with a client connected",
  "[net][metrics]") {
  auto server = start_test_server([] { return std::string(); });
  int idle = connect_local(server->port());
  std::this_thread::sleep_for(
    std::chrono::milliseconds(100)); // the server is now waiting on it
  auto start = steady::now();
  server.reset();
  double took = seconds_since(start);
  INFO("destructor took " << took << " s");
  CHECK(took < 1.0);
  ::close(idle);

  auto idle_server = start_test_server([] { return std::string(); });
  start = steady::now();
  idle_server.reset();
  CHECK(seconds_since(start) < 1.0);
}

TEST_CASE("metrics_endpoint reports bind failures as values",
          "[net][metrics]") {
  auto first = start_test_server([] { return std::string(); });
  auto second = metrics_endpoint::start("127.0.0.1", first->port(),
                                        [] { return std::string(); });
  CHECK_FALSE(second.ok());
  std::string error = second.message();
  INFO(error);
  CHECK(error.find("127.0.0.1:" + std::to_string(first->port()))
        != std::string::npos);
  CHECK(error.find("Address already in use") != std::string::npos);
  CHECK(error.find('\n') == std::string::npos);

  // 192.0.2.1 is TEST-NET-1: never a local address, and no DNS involved.
  auto unbound = metrics_endpoint::start("192.0.2.1", 0,
                                         [] { return std::string(); });
  CHECK_FALSE(unbound.ok());
  error = unbound.message();
  INFO(error);
  CHECK(error.find("192.0.2.1:0") != std::string::npos);
  CHECK(error.find("Cannot assign requested address") != std::string::npos);
}
