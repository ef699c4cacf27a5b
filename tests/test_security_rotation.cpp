// Certificate rotation without stopping the job: node 0's certificate is
// re-issued in place mid-job and new connections get the new one; a second
// CA added to the bundle is trusted alongside the first (a changeover);
// the job keeps training, and an operator can still reach it.

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
