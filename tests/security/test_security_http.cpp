// /metrics and the serving API behind credentials, through a real HTTP
// client (curl): a daemon's /metrics under a Prometheus web config (TLS,
// bcrypt basic auth: none or wrong 401, right 200; plaintext to the TLS
// port refused; a client certificate required when client_ca_file is
// given), and `tutti serve` with API keys (/v1/* 401 without or with a
// wrong key, 200 with one, 429 with Retry-After past its rate; /health
// open; /metrics under basic auth), and `tutti serve` over HTTPS from the
// same web config's tls_server_config.

#include <catch2/catch.hpp>

#include <regex>

#include "security_support.hpp"
#include "serve_test_support.hpp"
#include "tutti/net/metrics_endpoint.hpp"
#include "tutti/security/api_keys.hpp"
#include "tutti/security/web_config.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// The HTTP status curl got ("000": no HTTP answer at all).
std::string http_status(const std::string& curl_args) {
  auto r = run(
    "curl -s -o /dev/null -w '%{http_code}' --max-time 10 " + curl_args, 30);
  return r.output.substr(0, 3);
}

} // namespace

TEST_CASE("a daemon's /metrics under a web config: TLS and bcrypt basic auth",
          "[security]") {
  auto [dir, data] = scratch_with_data("security_http_metrics");
  auto pki = make_pki(dir);
  const auto d = pki.dir.string();
  const int port = port_block(49, 4);
  const int metrics_port = port + 3;
  auto web = dir / "web.yaml";
  write_text(web, node0_tls_server_config("pki", "  min_version: TLS13\n")
                    + "basic_auth_users:\n  prometheus: "
                    + bcrypt("scrape-secret") + "\n");
  // One daemon of a one-node job, training, with /metrics on.
  auto config = dir / "job.yaml";
  write_text(config, daemon_config(data.string(), (dir / "run").string(), port,
                                   100000, {"127.0.0.1"})
                       + "metrics:\n  port: " + std::to_string(metrics_port)
                       + "\n  web_config: " + web.string() + "\n");
  auto node = start_daemon(config, 0, dir / "node0.log");
  const auto metrics = dir / "run" / "metrics.jsonl";
  REQUIRE(wait_until(
    [&] { return count_lines(metrics) >= 2 || !node->running(); }, 120));
  INFO(tail(read_text(dir / "node0.log")));
  REQUIRE(node->running());
  // The node certificate names node-0 (its CN and a DNS name): the name a
  // scraper checks (Prometheus: tls_config.server_name).
  const auto url = "https://node-0:" + std::to_string(metrics_port)
                   + "/metrics";
  const auto tls = "--resolve node-0:" + std::to_string(metrics_port)
                   + ":127.0.0.1 --cacert " + d + "/ca.crt ";
  CHECK(http_status(tls + url) == "401");
  CHECK(http_status(tls + "-u prometheus:wrong " + url) == "401");
  CHECK(http_status(tls + "-u nobody:scrape-secret " + url) == "401");
  CHECK(http_status(tls + "-u prometheus:scrape-secret " + url) == "200");
  auto body = run(
    "curl -sS --max-time 10 " + tls + "-u prometheus:scrape-secret " + url, 30);
  CHECK(body.output.find("tutti_") != std::string::npos);
  // The daemon's dashboard: the same listener, TLS and basic auth.
  const auto page = "https://node-0:" + std::to_string(metrics_port)
                    + "/dashboard";
  for (const std::string path : {"", "/api/steps?since=0", "/api/events"}) {
    const auto at = "'" + page + path + "'";
    CHECK(http_status(tls + at) == "401");
    CHECK(http_status(tls + "-u prometheus:scrape-secret " + at) == "200");
  }
  // Plaintext HTTP to the TLS port gets no HTTP answer.
  CHECK(
    http_status("http://127.0.0.1:" + std::to_string(metrics_port) + "/metrics")
    == "000");
  // TLS 1.2 is refused when min_version is TLS13.
  CHECK(http_status(tls + "--tls-max 1.2 -u prometheus:scrape-secret " + url)
        == "000");
  // The password is nowhere in the daemon's output or logs.
  CHECK(read_text(dir / "node0.log").find("scrape-secret")
        == std::string::npos);
}

TEST_CASE("a web config with client_ca_file requires a client certificate; "
          "bad web configs are refused by key",
          "[security]") {
  auto root = scratch("security_http_web_endpoint");
  auto pki = make_pki(root);
  const auto d = pki.dir.string();
  tutti::security::web_config cfg;
  {
    auto web = root / "web.yaml";
    write_text(
      web, node0_tls_server_config(d, "  client_ca_file: " + d + "/ca.crt\n"));
    auto loaded = tutti::security::load_web_config(web.string());
    INFO(loaded.message());
    REQUIRE(loaded.ok());
    cfg = loaded.value();
  }
  auto endpoint = tutti::net::metrics_endpoint::start(
    "127.0.0.1", 0, [] { return std::string("up 1\n"); }, cfg);
  INFO(endpoint.message());
  REQUIRE(endpoint.ok());
  const auto port = std::to_string(endpoint.value()->port());
  const auto url = "https://node-0:" + port + "/metrics";
  const auto tls = "--resolve node-0:" + port + ":127.0.0.1 --cacert " + d
                   + "/ca.crt ";
  CHECK(http_status(tls + url) == "000");
  CHECK(http_status(tls + "--cert " + d + "/user-vera.crt --key " + d
                    + "/user-vera.key " + url)
        == "200");
  CHECK(http_status(tls + "--cert " + (pki.other / "node-1.crt").string()
                    + " --key " + (pki.other / "node-1.key").string() + " "
                    + url)
        == "000");
  for (auto [text, named] :
       {std::pair{"basic_auth_users:\n  p: plaintext-password\n",
                  "basic_auth_users.p: not a bcrypt hash"},
        std::pair{"tls_server_config:\n  cert_file: x.crt\n",
                  "cert_file and key_file are required"},
        std::pair{"tls_config:\n  cert_file: x\n",
                  "tls_config: unknown key"}}) {
    auto bad = root / "bad.yaml";
    write_text(bad, text);
    auto loaded = tutti::security::load_web_config(bad.string());
    INFO(text);
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.message().find(named) != std::string::npos);
    CHECK(loaded.message().find("plaintext-password") == std::string::npos);
  }
}

TEST_CASE("tutti serve: API keys on /v1/* with a rate limit, /health open, "
          "/metrics under basic auth",
          "[security]") {
  auto root = scratch("security_http_serve");
  const auto model = write_random_export(
    root / "model", serve_test_config(256, 32, 64, 2, 4, 2, 4, 2, 64), 41);
  const std::string key = "sk-test-0123456789abcdef";
  auto keys = root / "keys.yaml";
  write_text(keys,
             "keys:\n  alice: {sha256: " + tutti::security::sha256_hex(key)
               + ", rate_per_minute: 3}\n  bob: "
               + tutti::security::sha256_hex("another key") + "\n");
  auto web = root / "web.yaml";
  write_text(web, "basic_auth_users:\n  prometheus: " + bcrypt("scrape-secret")
                    + "\n");
  auto file = root / "serve.yaml";
  write_text(file, "serve:\n  model: " + model.string()
                     + "\n  listen: 127.0.0.1:0\n  api_keys: " + keys.string()
                     + "\n  metrics_web_config: " + web.string() + "\n");
  auto log = root / "serve.log";
  serve_process server(file, log, 30);
  INFO(server.log_text);
  REQUIRE(server.port != 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port);
  CHECK(http_status(url + "/health") == "200");
  CHECK(http_status(url + "/v1/models") == "401");
  CHECK(http_status("-H 'Authorization: Bearer wrong' " + url + "/v1/models")
        == "401");
  auto body = run("curl -sS --max-time 10 " + url + "/v1/models", 30);
  CHECK(body.output.find("invalid_api_key") != std::string::npos);
  const auto bearer = "-H 'Authorization: Bearer " + key + "' ";
  for (int i = 0; i < 3; ++i)
    CHECK(http_status(bearer + url + "/v1/models") == "200");
  // The fourth within a minute: over alice's 3 a minute.
  auto limited = run("curl -s -i --max-time 10 " + bearer + url + "/v1/models",
                     30);
  INFO(limited.output);
  CHECK(limited.output.find(" 429") != std::string::npos);
  CHECK(std::regex_search(limited.output,
                          std::regex("Retry-After: (1[0-9]|20)\r")));
  // Another key has its own allowance.
  CHECK(
    http_status("-H 'Authorization: Bearer another key' " + url + "/v1/models")
    == "200");
  CHECK(http_status(url + "/metrics") == "401");
  CHECK(http_status("-u prometheus:wrong " + url + "/metrics") == "401");
  CHECK(http_status("-u prometheus:scrape-secret " + url + "/metrics")
        == "200");
  // The dashboard is behind the same basic auth as /metrics.
  for (const char* page : {"/dashboard", "/dashboard/api/metrics"}) {
    CHECK(http_status(url + page) == "401");
    CHECK(http_status("-u prometheus:scrape-secret " + url + page) == "200");
  }
  CHECK(read_text(log).find(key) == std::string::npos);
}

TEST_CASE("tutti serve over HTTPS: the web config's tls_server_config puts "
          "the whole front on TLS",
          "[security]") {
  auto root = scratch("security_http_serve_tls");
  auto pki = make_pki(root);
  const auto d = pki.dir.string();
  const auto model = write_random_export(
    root / "model", serve_test_config(256, 32, 64, 2, 4, 2, 4, 2, 64), 43);
  auto web = root / "web.yaml";
  write_text(web, node0_tls_server_config(d, "  min_version: TLS13\n"));
  auto file = root / "serve.yaml";
  write_text(file, "serve:\n  model: " + model.string()
                     + "\n  listen: 127.0.0.1:0\n  metrics_web_config: "
                     + web.string() + "\n");
  auto log = root / "serve.log";
  serve_process server(file, log, 30, true);
  INFO(server.log_text);
  REQUIRE(server.port != 0);
  const auto port = std::to_string(server.port);
  // The certificate names node-0: clients check it against the cluster CA.
  const auto tls = "--resolve node-0:" + port + ":127.0.0.1 --cacert " + d
                   + "/ca.crt ";
  const auto url = "https://node-0:" + port;
  CHECK(http_status(tls + url + "/health") == "200");
  CHECK(http_status(tls + url + "/metrics") == "200");
  auto done = run("curl -sS --max-time 20 " + tls + url
                    + "/v1/completions -H 'Content-Type: application/json' "
                      "-d '{\"prompt\": \"hi\", \"max_tokens\": 4, "
                      "\"temperature\": 0, \"stream\": true}'",
                  30);
  INFO(done.output);
  CHECK(done.output.find("data: [DONE]") != std::string::npos);
  // No plaintext on the same port, and a client without the CA is refused.
  CHECK(http_status("http://127.0.0.1:" + port + "/health") != "200");
  CHECK(http_status(url + "/health --resolve node-0:" + port + ":127.0.0.1")
        == "000");
}
