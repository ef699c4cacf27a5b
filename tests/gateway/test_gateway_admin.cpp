// The gateway's /admin/ endpoints are no open control port: a client that
// is not on loopback is refused (403, one line saying why) unless the
// gateway has gateway.admin_policy and the request carries one of its
// tokens, an operator's to promote or roll back. `tutti rollout` and the
// shell's `rollout` send the token (--token-file, TUTTI_TOKEN_FILE).
// Real processes and HTTP: the gateway is bound on 0.0.0.0 and reached
// through this machine's non-loopback address. Its replicas are addresses
// nothing answers on: the rollout and its admin endpoints work without.

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <sstream>

#include "gateway_process.hpp"
#include "security_support.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// The first IPv4 address of `hostname -I` that is not loopback, or "".
std::string non_loopback_ipv4() {
  auto r = run("hostname -I", 10);
  std::istringstream words(r.status == 0 ? r.output : "");
  std::string word;
  while (words >> word)
    if (word.find(':') == std::string::npos && word.rfind("127.", 0) != 0)
      return word;
  return "";
}

// A gateway with a canary at 10% that nothing moves on by itself (no
// traffic, no judgement: unreachable replicas are not rolled back).
void start_gateway(gateway_process& gw, const std::string& gateway_section) {
  const auto port = gw.port;
  write_text(gw.config,
             "gateway:\n  health_interval_s: 0.5\n" + gateway_section
               + "stable:\n  version: tiny@v1\n  replicas: [127.0.0.1:"
               + std::to_string(port + 1) + "]\ncanary:\n  version: tiny@v2\n"
               + "  replicas: [127.0.0.1:" + std::to_string(port + 2)
               + "]\n  steps: [10, 50, 100]\n  step_s: 3600\n"
                 "  min_requests: 1000000\n  unhealthy_probes: 1000000\n");
  gw.start();
}

struct answer {
  int status = 0; // 0: no HTTP answer
  std::string body;
};

answer admin(const std::string& host, int port, const std::string& method,
             const std::string& path, const std::string& token = "") {
  httplib::Client c(host, port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(10, 0);
  httplib::Headers h;
  if (!token.empty())
    h.emplace("Authorization", "Bearer " + token);
  auto r = method == "GET" ? c.Get(path.c_str(), h)
                           : c.Post(path.c_str(), h, "", "application/json");
  if (!r)
    return {};
  return {r->status, r->body};
}

// The refusal's one line, from the gateway's error shape.
std::string error_message(const answer& a) {
  auto j = nlohmann::json::parse(a.body, nullptr, false);
  if (j.is_discarded() || !j.contains("error") || !j["error"].is_object())
    return "";
  CHECK(j["error"]["code"] == a.status);
  return j["error"]["message"].get<std::string>();
}

// The address a client from elsewhere uses; without one the test exits 77,
// which CTest reports as skipped, never as passed.
std::string non_loopback_ipv4_or_skip() {
  auto ip = non_loopback_ipv4();
  if (ip.empty()) {
    std::printf("SKIPPED: this machine has no non-loopback IPv4 address "
                "(hostname -I), so no client can come from elsewhere\n");
    std::exit(77);
  }
  return ip;
}

} // namespace

TEST_CASE("gateway /admin/ answers loopback only without an admin policy",
          "[integration][security]") {
  const auto ip = non_loopback_ipv4_or_skip();
  const auto root = scratch("gateway_admin_loopback");
  const int port = port_block(211, 3);
  gateway_process gw{root / "gateway.yaml", root / "gateway.log", port,
                     "0.0.0.0"};
  start_gateway(gw, "");
  INFO(read_text(gw.log));
  REQUIRE(wait_until(
    [&] { return admin("127.0.0.1", port, "GET", "/admin/status").status
                 == 200; },
    30));

  // From the machine's own non-loopback address: refused, saying why.
  auto promote = admin(ip, port, "POST", "/admin/promote");
  CHECK(promote.status == 403);
  CHECK(has(error_message(promote), "loopback clients only"));
  CHECK(has(error_message(promote), "gateway.admin_policy"));
  CHECK(admin(ip, port, "GET", "/admin/status").status == 403);
  CHECK(admin(ip, port, "POST", "/admin/rollback").status == 403);
  // The serving side stays open to everyone.
  CHECK(admin(ip, port, "GET", "/health").status == 200);
  auto cli = run(tutti_bin() + " rollout promote " + ip + ":"
                   + std::to_string(port),
                 30);
  INFO(cli.output);
  CHECK(cli.status == 1);
  CHECK(has(cli.output, "loopback clients only"));

  // On loopback the shell shows and steers the rollout with no token.
  const auto here = "127.0.0.1:" + std::to_string(port);
  auto status = run(tutti_bin() + " shell -c 'rollout status " + here + "'",
                    30);
  INFO(status.output);
  CHECK(status.status == 0);
  CHECK(has(status.output, "\"stable_version\": \"tiny@v1\""));
  CHECK(has(status.output, "\"canary_share_percent\": 10"));
  auto steered = run(tutti_bin() + " shell -c 'rollout promote " + here
                       + "; rollout events " + here + "'",
                     30);
  INFO(steered.output);
  CHECK(steered.status == 0);
  CHECK(has(steered.output, "\"canary_share_percent\": 50"));
  CHECK(has(steered.output, "takes 50.0%"));
  // Bad input in one line, the usage named.
  auto bad = run(tutti_bin() + " shell -c 'rollout promot " + here + "'", 30);
  CHECK(bad.status == 2);
  CHECK(has(bad.output, "did you mean 'promote'"));
}

TEST_CASE("gateway /admin/ from elsewhere needs a token of its admin policy",
          "[integration][security]") {
  const auto ip = non_loopback_ipv4_or_skip();
  const auto root = scratch("gateway_admin_policy");
  const auto policy = root / "admin-policy.yaml";
  const auto viewer = issue_token(policy, "vera", "viewer");
  const auto operator_ = issue_token(policy, "otto", "operator");
  const int port = port_block(213, 3);
  gateway_process gw{root / "gateway.yaml", root / "gateway.log", port,
                     "0.0.0.0"};
  start_gateway(gw, "  admin_policy: " + policy.string() + "\n");
  INFO(read_text(gw.log));
  REQUIRE(wait_until(
    [&] { return admin("127.0.0.1", port, "GET", "/admin/status").status
                 == 200; },
    30));
  const auto token_of = [](const fs::path& file) {
    auto text = read_text(file);
    return text.substr(0, text.find('\n'));
  };

  // No token, or one the policy does not hold: 401.
  auto none = admin(ip, port, "POST", "/admin/promote");
  CHECK(none.status == 401);
  CHECK(has(error_message(none), "role operator"));
  CHECK(admin(ip, port, "POST", "/admin/promote", "tutti_not_a_token").status
        == 401);
  // A viewer looks but does not steer.
  CHECK(admin(ip, port, "GET", "/admin/status", token_of(viewer)).status
        == 200);
  auto looked_only = admin(ip, port, "POST", "/admin/promote",
                           token_of(viewer));
  CHECK(looked_only.status == 403);
  CHECK(has(error_message(looked_only), "needs role operator"));
  // An operator promotes, from the CLI with --token-file and from the
  // shell with TUTTI_TOKEN_FILE, as the job clients take it.
  const auto there = ip + ":" + std::to_string(port);
  auto cli = run(tutti_bin() + " rollout promote " + there + " --token-file "
                   + operator_.string(),
                 30);
  INFO(cli.output);
  CHECK(cli.status == 0);
  CHECK(has(cli.output, "\"canary_share_percent\": 50"));
  auto shell = run("env TUTTI_TOKEN_FILE=" + operator_.string() + " "
                     + tutti_bin() + " shell -c 'rollout promote " + there
                     + "'",
                   30);
  INFO(shell.output);
  CHECK(shell.status == 0);
  CHECK(has(shell.output, "\"canary_share_percent\": 100"));
  auto refused = run(tutti_bin() + " shell -c 'rollout rollback " + there
                       + " --token-file " + viewer.string() + "'",
                     30);
  INFO(refused.output);
  CHECK(refused.status == 1);
  CHECK(has(refused.output, "needs role operator"));
}
