// Certificate rotation without stopping the job: node 0's certificate is
// re-issued in place mid-job and new connections get the new one; a second
// CA added to the bundle is trusted alongside the first (a changeover);
// the job keeps training, and an operator can still reach it. A revoked
// node certificate (the CA's revocation list) is cut off.

#include <catch2/catch.hpp>

#include "security_support.hpp"
#include "test_support.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

TEST_CASE("a node certificate rotated mid-job is used for new connections "
          "and the job keeps training",
          "[security]") {
  using namespace tutti::security;
  auto [dir, data] = scratch_with_data("security_rotation");
  auto pki = make_pki(dir);
  const int port = port_block(45);
  auto job = start_tls_job(pki, dir, data, port);
  const auto& metrics = job.metrics;
  const auto d = pki.dir.string();
  const auto ca = d + "/ca.crt";
  const auto before = presented_serial(port, ca, d + "/user-ada.crt",
                                       d + "/user-ada.key");
  REQUIRE_FALSE(before.empty());

  identity node;
  node.kind = identity_kind::node;
  node.node_rank = 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(issue_certificate(d, node, 86400).ok());
  const auto after = presented_serial(port, ca, d + "/user-ada.crt",
                                      d + "/user-ada.key");
  INFO("serial before " << before << ", after " << after);
  CHECK_FALSE(after.empty());
  CHECK(after != before);
  // A CA changeover: the new CA appended to the bundle every daemon reads;
  // its certificates are trusted for new connections, the old CA's too.
  {
    auto bundle = read_text(ca) + read_text(pki.other / "ca.crt");
    write_text(ca, bundle);
  }
  CHECK(tls_peer_accepted(port, ca, (pki.other / "node-1.crt").string(),
                          (pki.other / "node-1.key").string()));
  CHECK(
    tls_peer_accepted(port, ca, d + "/user-vera.crt", d + "/user-vera.key"));
  const int steps_at_rotation = count_lines(metrics);
  CHECK(wait_until(
    [&] { return count_lines(metrics) >= steps_at_rotation + 5; }, 60));
  auto r = run("env TUTTI_TLS_CA=" + ca + " TUTTI_TLS_CERT=" + d
                 + "/user-ada.crt TUTTI_TLS_KEY=" + d + "/user-ada.key "
                 + tutti_bin() + " shell --connect 127.0.0.1:"
                 + std::to_string(port) + " -c 'status; stop'",
               60);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(job.node0->wait(120) == 0);
  CHECK(job.node1->wait(60) == 0);
}

TEST_CASE("a revoked node certificate is cut off: its connections are "
          "closed and new ones refused; a revoked user is refused",
          "[security]") {
  auto [dir, data] = scratch_with_data("security_revocation");
  auto pki = make_pki(dir);
  const auto d = pki.dir.string();
  const auto ca = d + "/ca.crt";
  const int port = port_block(47);
  auto job = start_tls_job(pki, dir, data, port, "    crl: " + d + "/ca.crl\n");
  CHECK(tls_peer_accepted(port, ca, d + "/node-1.crt", d + "/node-1.key"));
  auto shell = [&](const std::string& user, const std::string& commands) {
    return run("env TUTTI_TLS_CA=" + ca + " TUTTI_TLS_CERT=" + d + "/user-"
                 + user + ".crt TUTTI_TLS_KEY=" + d + "/user-" + user + ".key "
                 + tutti_bin() + " shell --connect 127.0.0.1:"
                 + std::to_string(port) + " -c '" + commands + "'",
               60);
  };
  CHECK(shell("vera", "status").status == 0);

  auto r = run(tutti_bin() + " certs revoke --ca " + d + " --node 1", 30);
  INFO(r.output);
  REQUIRE(r.status == 0);
  // Node 0 closes node 1's connections (both directions) within its
  // recheck: the job loses node 1.
  const auto log0 = dir / "node0.log";
  CHECK(wait_until(
    [&] {
      return read_text(log0).find("job interrupted") != std::string::npos;
    },
    10));
  CHECK(read_text(job.run_dir / "tuttid-0.log.jsonl")
          .find("its certificate was revoked")
        != std::string::npos);
  // New connections with it are refused; other certificates still pass.
  CHECK_FALSE(
    tls_peer_accepted(port, ca, d + "/node-1.crt", d + "/node-1.key"));
  CHECK(tls_peer_accepted(port, ca, d + "/user-ada.crt", d + "/user-ada.key"));
  // A daemon with the revoked certificate does not start.
  auto again = start_daemon(job.config, 1, dir / "node1-again.log");
  CHECK(again->wait(30) == 2);
  CHECK(read_text(dir / "node1-again.log").find("revoked")
        != std::string::npos);

  // A revoked user: refused at the handshake.
  r = run(tutti_bin() + " certs revoke --ca " + d + " --user vera", 30);
  INFO(r.output);
  REQUIRE(r.status == 0);
  r = shell("vera", "status");
  INFO(r.output);
  CHECK(r.status != 0);
  r = shell("ada", "stop");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(job.node0->wait(120) == 0);
}
