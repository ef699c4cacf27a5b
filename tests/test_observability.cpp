// observability: Prometheus text exposition (format details, escaping,
// histograms read back, and promtool's verdict: promtool is a test
// dependency) and the /metrics HTTP server's behaviour with good and bad
// clients.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tutti/observability/histogram.hpp"
#include "tutti/observability/metrics_http_server.hpp"
#include "tutti/observability/prometheus_text.hpp"

using namespace tutti::observability;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A sample text that exercises every feature: labels that need escaping,
// a counter, special values, interleaved samples.
std::string realistic_text() {
  prometheus_text t;
  t.family("tutti_step_loss", "gauge", "Training loss of the last step.");
  t.family("tutti_tokens_total", "counter", "Tokens processed since start.");
  t.family("tutti_expert_load", "gauge",
           "Tokens routed to each expert\nin the last step (C:\\ path).");
  t.sample("tutti_step_loss", {}, 2.345678901234);
  t.sample("tutti_expert_load", {{"layer", "0"}, {"expert", "0"}}, 120);
  t.sample("tutti_tokens_total", {{"rank", "0"}}, 1e9);
  t.sample("tutti_expert_load", {{"layer", "0"}, {"expert", "1"}}, 0);
  t.sample("tutti_tokens_total", {{"rank", "1"}}, 1e9 + 1);
  t.family("tutti_grad_norm", "gauge", "Gradient norm, \"pre-clip\".");
  t.sample("tutti_grad_norm",
           {{"note", "quote \" backslash \\ newline \n end"}},
           std::numeric_limits<double>::quiet_NaN());
  t.family("tutti_lr", "gauge", "Learning rate.");
  t.sample("tutti_lr", {{"bound", "upper"}},
           std::numeric_limits<double>::infinity());
  t.sample("tutti_lr", {{"bound", "lower"}},
           -std::numeric_limits<double>::infinity());
  t.histogram_family("tutti_step_seconds", "Step time.");
  histogram steps({0.1, 0.25, 1});
  for (double v : {0.05, 0.2, 0.2, 0.7, 3.0})
    steps.observe(v);
  t.histogram_sample("tutti_step_seconds", {{"rank", "0"}}, steps.counts());
  t.histogram_sample("tutti_step_seconds", {{"rank", "1"}},
                     histogram({0.1, 0.25, 1}).counts());
  return t.str();
}

// One sample line read back: the metric name, its labels with their
// escapes undone, and the value.
struct parsed_sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The samples of an exposition text (comment lines skipped), read the way
// a scraper reads them; a line it cannot read fails the test.
std::vector<parsed_sample> parse_samples(const std::string& text) {
  std::vector<parsed_sample> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    INFO(line);
    parsed_sample s;
    size_t i = line.find_first_of("{ ");
    REQUIRE(i != std::string::npos);
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        const size_t eq = line.find("=\"", i);
        REQUIRE(eq != std::string::npos);
        const std::string label = line.substr(i, eq - i);
        std::string value;
        for (i = eq + 2; line.at(i) != '"'; ++i) {
          if (line[i] != '\\') {
            value += line[i];
            continue;
          }
          const char escaped = line.at(++i);
          REQUIRE((escaped == '\\' || escaped == '"' || escaped == 'n'));
          value += escaped == 'n' ? '\n' : escaped;
        }
        s.labels[label] = value;
        ++i; // the closing quote
        if (line.at(i) == ',')
          ++i;
      }
      ++i; // the closing brace
    }
    REQUIRE(line.at(i) == ' ');
    s.value = std::strtod(line.c_str() + i + 1, nullptr);
    out.push_back(s);
  }
  return out;
}

} // namespace

// --- exposition format -------------------------------------------------------

TEST_CASE("prometheus_text writes HELP and TYPE before samples",
          "[observability]") {
  prometheus_text t;
  t.family("tutti_loss", "gauge", "Loss of the last step.");
  t.sample("tutti_loss", {}, 1.5);
  t.sample("tutti_loss", {{"split", "eval"}}, 2);
  CHECK(t.str()
        == "# HELP tutti_loss Loss of the last step.\n"
           "# TYPE tutti_loss gauge\n"
           "tutti_loss 1.5\n"
           "tutti_loss{split=\"eval\"} 2\n");
}

TEST_CASE(
  "prometheus_text groups interleaved samples by family in declaration order",
  "[observability]") {
  prometheus_text t;
  t.family("b_metric", "gauge", "B.");
  t.family("a_total", "counter", "A.");
  t.sample("a_total", {{"k", "1"}}, 1);
  t.sample("b_metric", {{"k", "1"}}, 10);
  t.sample("a_total", {{"k", "2"}}, 2);
  t.sample("b_metric", {{"k", "2"}}, 20);
  CHECK(t.str()
        == "# HELP b_metric B.\n"
           "# TYPE b_metric gauge\n"
           "b_metric{k=\"1\"} 10\n"
           "b_metric{k=\"2\"} 20\n"
           "# HELP a_total A.\n"
           "# TYPE a_total counter\n"
           "a_total{k=\"1\"} 1\n"
           "a_total{k=\"2\"} 2\n");
}

TEST_CASE("prometheus_text escapes label values and HELP text",
          "[observability]") {
  prometheus_text t;
  t.family("m", "gauge", "say \"hi\" \\ then\nmore");
  t.sample("m", {{"path", "C:\\dir\\\"x\"\nnext"}, {"plain", "ok"}}, 1);
  CHECK(t.str()
        == "# HELP m say \"hi\" \\\\ then\\nmore\n"
           "# TYPE m gauge\n"
           "m{path=\"C:\\\\dir\\\\\\\"x\\\"\\nnext\",plain=\"ok\"} 1\n");
}

TEST_CASE(
  "prometheus_text prints values with round-trip precision and special values",
  "[observability]") {
  CHECK(format_sample_value(std::numeric_limits<double>::quiet_NaN()) == "NaN");
  CHECK(format_sample_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_sample_value(-std::numeric_limits<double>::infinity())
        == "-Inf");
  CHECK(format_sample_value(0) == "0");
  CHECK(format_sample_value(42) == "42");
  CHECK(format_sample_value(-3.5) == "-3.5");
  for (double v : {0.1, 1.0 / 3.0, 2.345678901234e-300, 1.7976931348623157e308,
                   123456789012345678.0}) {
    std::string text = format_sample_value(v);
    INFO(text);
    CHECK(std::strtod(text.c_str(), nullptr) == v);
  }
  prometheus_text t;
  t.family("m", "gauge", "h");
  t.sample("m", {{"v", "nan"}}, std::nan(""));
  t.sample("m", {{"v", "inf"}}, HUGE_VAL);
  t.sample("m", {{"v", "-inf"}}, -HUGE_VAL);
  CHECK(t.str()
        == "# HELP m h\n# TYPE m gauge\nm{v=\"nan\"} NaN\nm{v=\"inf\"} "
           "+Inf\nm{v=\"-inf\"} -Inf\n");
}

TEST_CASE("prometheus_text rejects invalid names, naming them",
          "[observability]") {
  prometheus_text t;
  for (const char* bad : {"", "1abc", "a-b", "a b", "ä", "x{y}"}) {
    INFO("metric name '" << bad << "'");
    CHECK_FALSE(is_valid_metric_name(bad));
    CHECK_THROWS_AS(t.family(bad, "gauge", "h"), std::invalid_argument);
  }
  CHECK_THROWS_WITH(t.family("a-b", "gauge", "h"), Catch::Contains("'a-b'"));
  for (const char* good : {"a", "_a", ":a", "a:b_c9", "tutti_step_loss"})
    CHECK(is_valid_metric_name(good));

  t.family("m", "gauge", "h");
  for (const char* bad : {"", "1a", "a:b", "a-b", "a b"}) {
    INFO("label name '" << bad << "'");
    CHECK_FALSE(is_valid_label_name(bad));
    CHECK_THROWS_AS(t.sample("m", {{bad, "v"}}, 1), std::invalid_argument);
  }
  CHECK_THROWS_WITH(t.sample("m", {{"bad-label", "v"}}, 1),
                    Catch::Contains("'bad-label'"));
  for (const char* good : {"a", "_a", "A9_b"})
    CHECK(is_valid_label_name(good));
  CHECK(
    t.str()
    == "# HELP m h\n# TYPE m gauge\n"); // failed samples leave nothing behind
}

TEST_CASE("prometheus_text requires _total on counters and known types",
          "[observability]") {
  prometheus_text t;
  CHECK_THROWS_WITH(t.family("tokens", "counter", "h"),
                    Catch::Contains("'tokens'") && Catch::Contains("_total"));
  CHECK_NOTHROW(t.family("tokens_total", "counter", "h"));
  CHECK_NOTHROW(
    t.family("tokens", "gauge", "h")); // gauges may be named anything valid
  CHECK_THROWS_AS(t.family("h", "histogram", "h"), std::invalid_argument);
  CHECK_THROWS_AS(t.family("s", "untyped", "h"), std::invalid_argument);
}

TEST_CASE("prometheus_text rejects inconsistent use", "[observability]") {
  prometheus_text t;
  CHECK_THROWS_WITH(t.sample("undeclared", {}, 1),
                    Catch::Contains("'undeclared'"));
  t.family("m", "gauge", "h");
  CHECK_NOTHROW(
    t.family("m", "gauge", "h")); // same declaration again is harmless
  CHECK_THROWS_AS(t.family("m", "gauge", "other help"), std::invalid_argument);
  CHECK_THROWS_AS(t.sample("m", {{"a", "1"}, {"a", "2"}}, 1),
                  std::invalid_argument);
  t.sample("m", {{"a", "1"}, {"b", "2"}}, 1);
  CHECK_THROWS_AS(t.sample("m", {{"b", "2"}, {"a", "1"}}, 1),
                  std::invalid_argument); // same series
  CHECK_NOTHROW(t.sample("m", {{"a", "1"}, {"b", "3"}}, 1));
}

TEST_CASE("prometheus_text output ends with a newline", "[observability]") {
  prometheus_text empty;
  CHECK(empty.str().empty());
  std::string text = realistic_text();
  REQUIRE_FALSE(text.empty());
  CHECK(text.back() == '\n');
}

TEST_CASE("promtool accepts the rendered text", "[observability][promtool]") {
  // promtool (Debian's prometheus, installed by deploy/install-deps.sh) is
  // required: without it this fails rather than pass unchecked.
  REQUIRE(std::system("command -v promtool >/dev/null 2>&1") == 0);
  auto dir = std::filesystem::temp_directory_path()
             / ("tutti_observability_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto input = dir / "metrics.txt";
  auto output = dir / "promtool.out";
  {
    std::ofstream out(input, std::ios::binary);
    out << realistic_text();
  }
  std::string command = "promtool check metrics < '" + input.string() + "' > '"
                        + output.string() + "' 2>&1";
  int rc = std::system(command.c_str());
  INFO("text:\n" << read_file(input));
  INFO("promtool said:\n" << read_file(output));
  CHECK(rc == 0);
  std::filesystem::remove_all(dir);
}

// --- label escaping and histograms ----------------------------------------

TEST_CASE("prometheus_text escapes a quote and a newline in a label value",
          "[observability]") {
  prometheus_text t;
  t.family("tutti_gateway_replica_up", "gauge", "up");
  t.sample("tutti_gateway_replica_up",
           {{"replica", "stable-\"1\"\nnext"}, {"version", "v\\2"}}, 1);
  CHECK(t.str()
        == "# HELP tutti_gateway_replica_up up\n"
           "# TYPE tutti_gateway_replica_up gauge\n"
           "tutti_gateway_replica_up{replica=\"stable-\\\"1\\\"\\nnext\","
           "version=\"v\\\\2\"} 1\n");
  // Read back, the value is what was given.
  auto samples = parse_samples(t.str());
  REQUIRE(samples.size() == 1);
  CHECK(samples[0].labels["replica"] == "stable-\"1\"\nnext");
  CHECK(samples[0].labels["version"] == "v\\2");
}

TEST_CASE("prometheus_text writes a histogram's buckets, sum and count once "
          "per family",
          "[observability]") {
  histogram h({0.5, 1, 2.5});
  for (double v : {0.25, 0.5, 0.75, 3.0})
    h.observe(v);
  prometheus_text t;
  t.histogram_family("tutti_latency_seconds", "Latency.");
  t.histogram_sample("tutti_latency_seconds", {{"model", "m"}}, h.counts());
  t.histogram_sample("tutti_latency_seconds", {{"model", "n"}},
                     histogram({0.5, 1, 2.5}).counts());
  CHECK(t.str()
        == "# HELP tutti_latency_seconds Latency.\n"
           "# TYPE tutti_latency_seconds histogram\n"
           "tutti_latency_seconds_bucket{model=\"m\",le=\"0.5\"} 2\n"
           "tutti_latency_seconds_bucket{model=\"m\",le=\"1\"} 3\n"
           "tutti_latency_seconds_bucket{model=\"m\",le=\"2.5\"} 3\n"
           "tutti_latency_seconds_bucket{model=\"m\",le=\"+Inf\"} 4\n"
           "tutti_latency_seconds_sum{model=\"m\"} 4.5\n"
           "tutti_latency_seconds_count{model=\"m\"} 4\n"
           "tutti_latency_seconds_bucket{model=\"n\",le=\"0.5\"} 0\n"
           "tutti_latency_seconds_bucket{model=\"n\",le=\"1\"} 0\n"
           "tutti_latency_seconds_bucket{model=\"n\",le=\"2.5\"} 0\n"
           "tutti_latency_seconds_bucket{model=\"n\",le=\"+Inf\"} 0\n"
           "tutti_latency_seconds_sum{model=\"n\"} 0\n"
           "tutti_latency_seconds_count{model=\"n\"} 0\n");
}

TEST_CASE("a rendered histogram parses back to what was observed",
          "[observability]") {
  const std::vector<double> bounds = {0.001, 0.0025, 0.01, 0.1, 1, 10};
  const std::vector<double> observed = {0.0005, 0.002, 0.002, 0.05,   0.05, 0.5,
                                        7.0,    20.0,  0.001, 0.0025, 1e-9};
  histogram h(bounds);
  double sum = 0;
  for (double v : observed) {
    h.observe(v);
    sum += v;
  }
  prometheus_text t;
  t.histogram_family("tutti_ttft_seconds", "Time to first token.");
  t.histogram_sample("tutti_ttft_seconds", {{"model", "quote\" and\nnewline"}},
                     h.counts());
  const auto samples = parse_samples(t.str());
  REQUIRE(samples.size() == bounds.size() + 3);
  // The buckets in order, each the observations at or below its bound.
  for (size_t i = 0; i <= bounds.size(); ++i) {
    const auto& s = samples[i];
    INFO("bucket " << i);
    CHECK(s.name == "tutti_ttft_seconds_bucket");
    CHECK(s.labels.at("model") == "quote\" and\nnewline");
    const double le = i < bounds.size()
                        ? std::strtod(s.labels.at("le").c_str(), nullptr)
                        : HUGE_VAL;
    if (i < bounds.size())
      CHECK(le == bounds[i]);
    else
      CHECK(s.labels.at("le") == "+Inf");
    const auto at_or_below = std::count_if(observed.begin(), observed.end(),
                                           [&](double v) { return v <= le; });
    CHECK(s.value == static_cast<double>(at_or_below));
  }
  const auto& sum_sample = samples[bounds.size() + 1];
  const auto& count_sample = samples[bounds.size() + 2];
  CHECK(sum_sample.name == "tutti_ttft_seconds_sum");
  CHECK(sum_sample.value == sum);
  CHECK(count_sample.name == "tutti_ttft_seconds_count");
  CHECK(count_sample.value == static_cast<double>(observed.size()));
  CHECK(count_sample.labels == sum_sample.labels);
}

TEST_CASE("prometheus_text refuses histograms used as other types and bad "
          "counts",
          "[observability]") {
  prometheus_text t;
  t.histogram_family("h_seconds", "h");
  t.family("g", "gauge", "g");
  histogram h({1, 2});
  CHECK_THROWS_AS(t.sample("h_seconds", {}, 1), std::invalid_argument);
  CHECK_THROWS_AS(t.histogram_sample("g", {}, h.counts()),
                  std::invalid_argument);
  CHECK_THROWS_WITH(t.histogram_sample("h_seconds", {{"le", "1"}}, h.counts()),
                    Catch::Contains("le"));
  auto wrong = h.counts();
  wrong.cumulative.pop_back();
  CHECK_THROWS_AS(t.histogram_sample("h_seconds", {}, wrong),
                  std::invalid_argument);
  wrong = h.counts();
  wrong.upper_bounds = {2, 1};
  CHECK_THROWS_AS(t.histogram_sample("h_seconds", {}, wrong),
                  std::invalid_argument);
  CHECK_NOTHROW(t.histogram_sample("h_seconds", {}, h.counts()));
  CHECK_THROWS_AS(t.histogram_sample("h_seconds", {}, h.counts()),
                  std::invalid_argument); // the same series twice
  CHECK_THROWS_AS(t.histogram_family("g", "g"), std::invalid_argument);
}

namespace {

using steady = std::chrono::steady_clock;

double seconds_since(steady::time_point start) {
  return std::chrono::duration<double>(steady::now() - start).count();
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

std::unique_ptr<metrics_http_server> start_test_server(
  std::function<std::string()> render) {
  auto server = metrics_http_server::start("127.0.0.1", 0, std::move(render));
  INFO(server.message());
  REQUIRE(server.ok());
  REQUIRE(*server != nullptr);
  REQUIRE((*server)->port() != 0);
  return std::move(*server);
}

} // namespace

// --- HTTP server ---------------------------------------------------------------

TEST_CASE("metrics_http_server serves /metrics and answers other requests",
          "[observability][http]") {
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

TEST_CASE("metrics_http_server survives bad clients", "[observability][http]") {
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

TEST_CASE("metrics_http_server turns a throwing render into 500",
          "[observability][http]") {
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
  "metrics_http_server stops within a second, even with a client connected",
  "[observability][http]") {
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

TEST_CASE("metrics_http_server reports bind failures as values",
          "[observability][http]") {
  auto first = start_test_server([] { return std::string(); });
  auto second = metrics_http_server::start("127.0.0.1", first->port(),
                                           [] { return std::string(); });
  CHECK_FALSE(second.ok());
  std::string error = second.message();
  INFO(error);
  CHECK(error.find("127.0.0.1:" + std::to_string(first->port()))
        != std::string::npos);
  CHECK(error.find("Address already in use") != std::string::npos);
  CHECK(error.find('\n') == std::string::npos);

  // 192.0.2.1 is TEST-NET-1: never a local address, and no DNS involved.
  auto unbound = metrics_http_server::start("192.0.2.1", 0,
                                            [] { return std::string(); });
  CHECK_FALSE(unbound.ok());
  error = unbound.message();
  INFO(error);
  CHECK(error.find("192.0.2.1:0") != std::string::npos);
  CHECK(error.find("Cannot assign requested address") != std::string::npos);
}
