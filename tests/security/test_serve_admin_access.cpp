// `tutti serve`'s /admin/ is no open control port, and the client commands
// reach it wherever the front is: a service on HTTPS with basic auth on
// /metrics (serve.metrics_web_config) and tokens for /admin/
// (serve.admin_policy). `tutti status|shell|chaos CONFIG` speak TLS checked
// against TUTTI_TLS_CA (one line naming it when unset), basic auth stays on
// /metrics only, and a token sent is checked by role: a viewer looks, an
// operator steers, an unknown token is refused (401), each in one line. A
// malformed admin_policy stops the service at start, naming the key.
// Real processes, real TLS, curl and the CLI.

#include <catch2/catch.hpp>

#include "security_support.hpp"
#include "serve_test_support.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// A service of the tiny model at 127.0.0.1:`port` under `web` and `policy`.
std::string serve_yaml(const fs::path& root, int port, const fs::path& web,
                       const fs::path& policy) {
  return tiny_service_yaml(root / "model", port,
                           "  metrics_web_config: " + web.string()
                             + "\n  admin_policy: " + policy.string() + "\n");
}

} // namespace

TEST_CASE("tutti serve stops at start on a malformed admin_policy, naming it",
          "[security]") {
  const auto root = scratch("serve_admin_policy_bad");
  write_random_export(root / "model",
                      serve_test_config(256, 32, 64, 2, 4, 2, 4, 2, 64), 47);
  const auto web = root / "web.yaml";
  write_text(web,
             "basic_auth_users:\n  prometheus: " + bcrypt("secret") + "\n");
  const auto bad = root / "bad-policy.yaml";
  write_text(bad, "users: [not, a, map\n");
  const auto config = root / "serve.yaml";
  write_text(config, serve_yaml(root, port_block(227, 1), web, bad));
  auto r = run(tutti_bin() + " serve " + config.string(), 60);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(has(r.output, "serve.admin_policy"));
}

TEST_CASE("tutti serve's /admin/ on HTTPS: client commands over TLS, tokens "
          "checked by role",
          "[security]") {
  const auto root = scratch("serve_admin_access");
  auto pki = make_pki(root);
  const auto ca = (pki.dir / "ca.crt").string();
  write_random_export(root / "model",
                      serve_test_config(256, 32, 64, 2, 4, 2, 4, 2, 64), 47);
  const auto web = root / "web.yaml";
  write_text(web, node0_tls_server_config(pki.dir.string())
                    + "basic_auth_users:\n  prometheus: "
                    + bcrypt("scrape-secret") + "\n");
  const auto policy = root / "admin-policy.yaml";
  const auto viewer = issue_token(policy, "vera", "viewer");
  const auto operator_ = issue_token(policy, "otto", "operator");
  const int port = port_block(223, 1);
  const auto config = root / "serve.yaml";
  write_text(config, serve_yaml(root, port, web, policy));
  const auto log = root / "serve.log";
  child_process serve({tutti_bin(), "serve", config.string()}, log);
  const auto curl = "curl -s -o /dev/null -w '%{http_code}' --max-time 10 "
                    "--resolve node-0:"
                    + std::to_string(port) + ":127.0.0.1 --cacert " + ca
                    + " https://node-0:" + std::to_string(port);
  REQUIRE(wait_until(
    [&] {
      return run(curl + "/ready", 15).output == "200" || !serve.running();
    },
    60));
  INFO("tutti serve: " << tail(read_text(log)));
  REQUIRE(serve.running());
  const std::string target = " " + config.string();
  const std::string with_ca = "env TUTTI_TLS_CA=" + ca + " ";

  // Basic auth guards /metrics, not /admin/.
  CHECK(run(curl + "/metrics", 15).output == "401");
  CHECK(run(curl + "/metrics -u prometheus:scrape-secret", 15).output == "200");

  // Without the CA the client cannot check the front: one line saying so.
  auto no_ca = run("env -u TUTTI_TLS_CA " + tutti_bin() + " status" + target,
                   60);
  INFO(no_ca.output);
  CHECK(no_ca.status == 1);
  CHECK(has(no_ca.output, "TUTTI_TLS_CA"));

  // Another CA's certificate check fails: nothing is sent.
  auto other_ca = run("env TUTTI_TLS_CA=" + (pki.other / "ca.crt").string()
                        + " " + tutti_bin() + " status" + target,
                      60);
  INFO(other_ca.output);
  CHECK(other_ca.status == 1);
  CHECK(has(other_ca.output, "does not check against TUTTI_TLS_CA"));

  // The operator on the host, no token: looks and steers.
  auto status = run(with_ca + tutti_bin() + " status" + target, 60);
  INFO(status.output);
  CHECK(status.status == 0);
  CHECK(has(status.output, "state        ready"));

  // A viewer's token: looks, does not steer.
  const auto as_viewer = with_ca + "TUTTI_TOKEN_FILE=" + viewer.string() + " ";
  auto looked = run(
    as_viewer + tutti_bin() + " shell --connect" + target + " -c 'actors'", 60);
  INFO(looked.output);
  CHECK(looked.status == 0);
  CHECK(has(looked.output, "expert_shard/1"));
  auto steered = run(
    as_viewer + tutti_bin() + " chaos" + target + " kill_expert --rank 1", 60);
  INFO(steered.output);
  CHECK(steered.status == 1);
  CHECK(has(steered.output, "needs role operator"));

  // A token the policy does not know: refused, whatever the host.
  auto unknown = run(with_ca + "TUTTI_TOKEN=tutti_not_a_token " + tutti_bin()
                       + " status" + target,
                     60);
  INFO(unknown.output);
  CHECK(unknown.status == 1);
  CHECK(has(unknown.output, "not one of serve.admin_policy's"));

  // An operator's token steers: the shard dies and is restarted.
  auto chaos = run(with_ca + "TUTTI_TOKEN_FILE=" + operator_.string() + " "
                     + tutti_bin() + " chaos" + target
                     + " kill_expert --rank 1",
                   60);
  INFO(chaos.output);
  CHECK(chaos.status == 0);
  CHECK(wait_until(
    [&] {
      auto s = run(with_ca + tutti_bin() + " status" + target + " --json", 30);
      return has(s.output, "\"restarts\": 1")
             || has(s.output, "\"restarts\":1");
    },
    30));

  serve.signal(SIGTERM);
  CHECK(serve.wait(30) == 0);
}
