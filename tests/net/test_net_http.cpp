// net's HTTP server and client against each other: routes, parameters and
// addresses; guards (basic auth from a web config, a bearer check); the
// error page; the body limit; a malformed head; pipelined requests on one
// connection; a streamed answer, read as it comes and cancelled; HTTPS
// from a web config, checked against the right CA and refused with
// another; stop() letting a request in progress finish; failures as
// values.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "security_support.hpp"
#include "tutti/net/access.hpp"
#include "tutti/net/http_client.hpp"
#include "tutti/net/http_server.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

// A server on a free loopback port, with the defaults.
net::server_options loopback() { return net::server_options{}; }

net::client_options to(const net::http_server& server) {
  net::client_options o;
  o.host = "127.0.0.1";
  o.port = server.port();
  o.connect_timeout = std::chrono::seconds(2);
  o.read_timeout = std::chrono::seconds(5);
  return o;
}

void start(net::http_server& server) {
  auto s = server.start();
  INFO(s.message());
  REQUIRE(s.ok());
  REQUIRE(server.port() != 0);
}

void echo_routes(net::http_server& server) {
  server.get(
    "/echo", [](const net::http_request& req, net::http_response& res) {
      res.set_header("X-Remote", req.remote_addr);
      res.set_content(req.method + " " + req.path + " a=" + req.param("a")
                        + " h=" + req.header("x-test"),
                      "text/plain");
    });
  server.post(
    "/echo", [](const net::http_request& req, net::http_response& res) {
      res.set_content(req.body + "|" + req.param("field"), "text/plain");
    });
}

// Everything the server sends back on one raw connection, until it closes.
std::string raw_exchange(uint16_t port, const std::string& bytes) {
  socket_guard s(tcp_connect("127.0.0.1", port));
  REQUIRE(s.fd >= 0);
  REQUIRE(send_bytes(s.fd, bytes));
  return recv_for(s.fd, 5000, 1 << 20);
}

} // namespace

TEST_CASE("http_server routes requests and http_client reads the answers",
          "[net]") {
  net::http_server server(loopback());
  echo_routes(server);
  start(server);
  net::http_client client(to(server));

  auto got = client.get("/echo?a=1", {{"X-Test", "yes"}});
  REQUIRE(got.ok());
  CHECK(got->status == 200);
  CHECK(got->body == "GET /echo a=1 h=yes");
  CHECK(got->header("x-remote") == "127.0.0.1");
  CHECK(client.last_failure() == net::transport_failure::none);

  auto posted = client.post("/echo", "payload", "text/plain");
  REQUIRE(posted.ok());
  CHECK(posted->body == "payload|");
  auto form = client.post_form("/echo", {{"field", "a b&c"}});
  REQUIRE(form.ok());
  // The body as sent (URL-encoded), then the field the server decoded.
  CHECK(form->body.substr(form->body.find('|')) == "|a b&c");

  auto missing = client.get("/nope");
  REQUIRE(missing.ok());
  CHECK(missing->status == 404);
}

TEST_CASE("an error page gives every error the part's shape; a body over "
          "the limit is 413; a malformed head is 400",
          "[net]") {
  net::server_options o;
  o.max_body_bytes = 16;
  net::http_server server(o);
  echo_routes(server);
  server.set_error_page([](const net::http_request&, net::http_response& res) {
    res.set_content("{\"error\":" + std::to_string(res.status) + "}",
                    "application/json");
  });
  start(server);
  net::http_client client(to(server));
  auto missing = client.get("/nope");
  REQUIRE(missing.ok());
  CHECK(missing->status == 404);
  CHECK(missing->body == "{\"error\":404}");
  auto big = client.post("/echo", std::string(100, 'x'), "text/plain");
  REQUIRE(big.ok());
  CHECK(big->status == 413);
  CHECK(big->body == "{\"error\":413}");
  const auto bad = raw_exchange(server.port(),
                                "GET /echo HTTP/1.1\r\nno colon\r\n\r\n");
  CHECK(bad.rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK(bad.find("{\"error\":400}") != std::string::npos);
}

TEST_CASE("guards: basic auth from a web config, a bearer check on a prefix",
          "[net]") {
  net::http_server server(loopback());
  echo_routes(server);
  security::web_config web;
  web.users["scraper"] = bcrypt("secret");
  server.add_guard(net::basic_auth_guard(
    web, [](const std::string& path) { return path == "/echo"; }));
  server.add_guard(net::bearer_guard(
    "/v1/", [](const std::string& authorization, net::http_response& res) {
      if (authorization == "Bearer good")
        return false;
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content("no key\n", "text/plain");
      return true;
    }));
  server.get("/v1/models",
             [](const net::http_request&, net::http_response& res) {
               res.set_content("models", "text/plain");
             });
  start(server);

  net::http_client anyone(to(server));
  auto refused = anyone.get("/echo");
  REQUIRE(refused.ok());
  CHECK(refused->status == 401);
  CHECK(refused->header("WWW-Authenticate") == "Basic realm=\"tutti\"");
  CHECK(refused->body == "unauthorized\n");
  // "scraper:secret" and "scraper:wrong" in base64.
  auto right = anyone.get("/echo",
                          {{"Authorization", "Basic c2NyYXBlcjpzZWNyZXQ="}});
  REQUIRE(right.ok());
  CHECK(right->status == 200);
  auto wrong = anyone.get("/echo",
                          {{"Authorization", "Basic c2NyYXBlcjp3cm9uZw=="}});
  REQUIRE(wrong.ok());
  CHECK(wrong->status == 401);

  auto no_key = anyone.get("/v1/models");
  REQUIRE(no_key.ok());
  CHECK(no_key->status == 401);
  CHECK(no_key->body == "no key\n");
  auto options = to(server);
  options.bearer_token = "good";
  net::http_client keyed(options);
  auto with_key = keyed.get("/v1/models");
  REQUIRE(with_key.ok());
  CHECK(with_key->status == 200);
  CHECK(with_key->body == "models");
}

TEST_CASE("pipelined requests on one connection are answered in turn",
          "[net]") {
  net::server_options o;
  o.requests_per_connection = 3;
  net::http_server server(o);
  echo_routes(server);
  start(server);
  const std::string one = "GET /echo?a=1 HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string two = "GET /echo?a=2 HTTP/1.1\r\nHost: x\r\n\r\n";
  // The third is the connection's last: its answer closes it.
  const auto got = raw_exchange(server.port(), one + two + one);
  CHECK(got.find("a=1") < got.find("a=2"));
  CHECK(got.find("a=1", got.find("a=2")) != std::string::npos);
  CHECK(got.find("Connection: close") != std::string::npos);
}

TEST_CASE("a streamed answer arrives as it is produced; a client that stops "
          "reading ends it",
          "[net]") {
  net::http_server server(loopback());
  std::atomic<int> ended_complete{-1};
  server.post(
    "/stream", [&](const net::http_request& req, net::http_response& res) {
      auto sent = std::make_shared<int>(0);
      const int chunks = std::stoi(req.body);
      res.stream(
        "text/event-stream",
        [sent, chunks](net::chunk_sink& sink) {
          if (*sent == chunks) {
            sink.done();
            return true;
          }
          const auto event = "data: " + std::to_string((*sent)++) + "\n\n";
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return sink.write(event.data(), event.size());
        },
        [&ended_complete](bool completed) { ended_complete = completed; });
    });
  start(server);

  net::http_client client(to(server));
  int status = 0;
  std::string body;
  net::reply_stream reader;
  reader.on_head = [&](int s, const net::header_map& headers) {
    status = s;
    CHECK(headers.find("content-type")->second == "text/event-stream");
    return true;
  };
  reader.on_body = [&](const char* data, size_t n) {
    body.append(data, n);
    return true;
  };
  auto whole = client.post_streamed("/stream", "3", "text/plain", reader);
  REQUIRE(whole.ok());
  CHECK(status == 200);
  CHECK(body == "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  for (int i = 0; i < 100 && ended_complete == -1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(ended_complete == 1);

  ended_complete = -1;
  reader.on_body = [](const char*, size_t) { return false; }; // go away
  auto cancelled = client.post_streamed("/stream", "1000", "text/plain",
                                        reader);
  CHECK_FALSE(cancelled.ok());
  CHECK(client.last_failure() == net::transport_failure::canceled);
  for (int i = 0; i < 500 && ended_complete == -1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(ended_complete == 0);
}

TEST_CASE("stop() lets a request in progress finish", "[net]") {
  net::http_server server(loopback());
  std::atomic<bool> inside{false};
  server.get("/slow", [&](const net::http_request&, net::http_response& res) {
    inside = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    res.set_content("done", "text/plain");
  });
  start(server);
  expected<net::http_reply> got = status::error("not yet");
  std::thread client([&] {
    net::http_client c(to(server));
    got = c.get("/slow");
  });
  while (!inside)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  server.stop();
  client.join();
  REQUIRE(got.ok());
  CHECK(got->body == "done");
}

TEST_CASE("failures are values: a taken port, nothing listening", "[net]") {
  net::http_server first(loopback());
  start(first);
  net::server_options o;
  o.port = first.port();
  net::http_server second(o);
  auto s = second.start();
  REQUIRE_FALSE(s.ok());
  CHECK(s.message()
        == "cannot listen on 127.0.0.1:" + std::to_string(first.port())
             + ": Address already in use");

  auto options = to(first);
  first.stop();
  net::http_client client(options);
  auto r = client.get("/");
  CHECK_FALSE(r.ok());
  CHECK_FALSE(r.message().empty());
  CHECK(client.last_failure() == net::transport_failure::connection);
}

TEST_CASE("HTTPS from a web config: the right CA checks the server's name, "
          "another CA and plaintext are refused",
          "[net][security]") {
  auto root = scratch("net_http_tls");
  auto pki = make_pki(root);
  const auto d = pki.dir.string();
  net::server_options o;
  o.tls.cert_file = d + "/node-0.crt";
  o.tls.key_file = d + "/node-0.key";
  net::http_server server(o);
  echo_routes(server);
  start(server);
  CHECK(server.tls());

  auto options = to(server);
  options.tls = net::client_tls{d + "/ca.crt", "", "", "node-0"};
  net::http_client client(options);
  auto got = client.get("/echo?a=tls");
  INFO(got.message());
  REQUIRE(got.ok());
  CHECK(got->body == "GET /echo a=tls h=");

  options.tls->ca_file = (pki.other / "ca.crt").string();
  net::http_client other_ca(options);
  CHECK_FALSE(other_ca.get("/echo").ok());
  CHECK(other_ca.last_failure() == net::transport_failure::tls_verification);

  net::http_client plain(to(server));
  CHECK_FALSE(plain.get("/echo").ok());
}
