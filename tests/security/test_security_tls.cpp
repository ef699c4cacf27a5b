// Mutual TLS on daemon ports: a 2-daemon job with TLS trains like the same
// job in one process; peers without a certificate from the cluster CA
// (another CA, expired, none, plaintext CAF, random bytes, a stalled
// handshake) are dropped at the guard without touching the job or a core;
// a node certificate used to register as another node is refused by the
// coordinator; a daemon with bad TLS files does not start.

#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "security_support.hpp"
#include "test_support.hpp"
#include "tutti/runtime/system_config.hpp"
#include "tutti/client/coordinator_connect.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/security/tls_dialer.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// Waits up to `ms` for the peer to close `fd`; true if it did.
bool closed_within(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1)
    return false;
  char buf[256];
  return recv(fd, buf, sizeof(buf), 0) <= 0;
}

// Registers as node `claimed` over TLS with node-`holding`'s certificate;
// returns the coordinator's answer ("" when accepted).
std::string register_with_certificate(const test_pki& pki, int port,
                                      const fs::path& config, int holding,
                                      int claimed) {
  using namespace tutti;
  const auto d = pki.dir.string();
  auto client = security::tls_endpoint::load(
    {d + "/ca.crt", d + "/node-" + std::to_string(holding) + ".crt",
     d + "/node-" + std::to_string(holding) + ".key", "", ""},
    security::tls_role::client);
  REQUIRE(client.ok());
  security::tls_dialer::install(*client, std::chrono::seconds(2));
  auto cfg = load_job_config(config.string());
  REQUIRE(cfg.ok());
  system_options options;
  options.network = true;
  tutti_system_config sys_cfg{options};
  caf::actor_system sys{sys_cfg};
  auto coordinator = client::connect_coordinator(
    sys, {"127.0.0.1", static_cast<uint16_t>(port)});
  REQUIRE(coordinator.ok());
  caf::scoped_actor self{sys};
  node_registration reg;
  reg.node_rank = claimed;
  reg.host = "127.0.0.1";
  reg.port = port + 1 + claimed;
  reg.devices = 2;
  reg.config_fingerprint = fingerprint_text(*cfg);
  std::string answer = "no answer";
  self
    ->request(*coordinator, std::chrono::seconds(10), register_atom_v, reg,
              caf::actor{self})
    .receive([&](caf::ok_atom) { answer = ""; },
             [&](caf::error& err) { answer = sys.render(err); });
  return answer;
}

} // namespace

TEST_CASE("with mutual TLS, 2 daemons train like one process and only "
          "certified peers get in",
          "[security]") {
  auto [dir, data] = scratch_with_data("security_tls");
  auto pki = make_pki(dir);
  const int port = port_block(41);
  const int steps = 30;
  auto one = run_one_process(dir, data, steps);
  auto config = dir / "tls.yaml";
  write_text(config,
             tls_daemon_config(pki, data.string(), (dir / "two").string(), port,
                               steps, 60));
  const auto ca = (pki.dir / "ca.crt").string();
  const auto log_of = [&](int n) {
    return read_text(dir / "two"
                     / ("tuttid-" + std::to_string(n) + ".log.jsonl"));
  };

  auto node0 = start_daemon(config, 0, dir / "node0.log");
  REQUIRE(wait_until(
    [&] {
      return !node0->running()
             || log_of(0).find("coordinator listening") != std::string::npos;
    },
    30));
  REQUIRE(node0->running());

  // A plaintext CAF client: its BASP handshake is not a TLS ClientHello.
  {
    using namespace tutti;
    system_options options;
    options.network = true;
    tutti_system_config sys_cfg{options};
    caf::actor_system sys{sys_cfg};
    CHECK_FALSE(client::connect_coordinator(
                  sys, {"127.0.0.1", static_cast<uint16_t>(port)})
                  .ok());
  }
  // Random bytes.
  {
    int fd = tcp_connect("127.0.0.1", port);
    REQUIRE(fd >= 0);
    std::string noise(4096, '\0');
    for (size_t i = 0; i < noise.size(); ++i)
      noise[i] = static_cast<char>((i * 2654435761u) >> 13);
    send_bytes(fd, noise);
    CHECK(closed_within(fd, 3000));
    close(fd);
  }
  // A stalled handshake: dropped after security.handshake_timeout_s (2 s),
  // while the daemon spends almost no CPU.
  {
    const double cpu0 = cpu_seconds(node0->pid());
    int fd = tcp_connect("127.0.0.1", port);
    REQUIRE(fd >= 0);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(closed_within(fd, 5000));
    const double waited = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
    close(fd);
    const double cpu = cpu_seconds(node0->pid()) - cpu0;
    INFO("dropped after " << waited << " s; daemon CPU " << cpu << " s");
    CHECK(waited >= 1.5);
    CHECK(waited < 4.0);
    CHECK(cpu < 0.5 * waited);
  }
  // Certificates the guard must refuse: another CA's, an expired one, none.
  CHECK_FALSE(tls_peer_accepted(port, ca, (pki.other / "node-1.crt").string(),
                                (pki.other / "node-1.key").string()));
  CHECK_FALSE(tls_peer_accepted(port, ca, (pki.expired / "node-1.crt").string(),
                                (pki.expired / "node-1.key").string()));
  CHECK_FALSE(tls_peer_accepted(port, ca, "", ""));
  // A valid certificate gets through the guard.
  CHECK(tls_peer_accepted(port, ca, (pki.dir / "node-1.crt").string(),
                          (pki.dir / "node-1.key").string()));
  // Node 0's certificate registering as node 1: refused by the coordinator.
  auto answer = register_with_certificate(pki, port, config, 0, 1);
  CHECK(answer.find("names node 0, not node 1") != std::string::npos);
  tutti::security::tls_dialer::shutdown();
  REQUIRE(node0->running());

  // The real node 1 joins (the refused ones changed nothing) and the job
  // trains exactly like one process.
  auto node1 = start_daemon(config, 1, dir / "node1.log");
  int s0 = node0->wait(300), s1 = node1->wait(60);
  const auto log0 = log_of(0);
  INFO("node0: " << tail(read_text(dir / "node0.log")) << tail(log0));
  INFO("node1: " << tail(read_text(dir / "node1.log")) << tail(log_of(1)));
  REQUIRE(s0 == 0);
  REQUIRE(s1 == 0);
  CHECK(log0.find("mutual TLS 1.3 on as node 0") != std::string::npos);
  CHECK(log0.find("refused node 1 from 127.0.0.1: its certificate names "
                  "node 0")
        != std::string::npos);
  CHECK(log0.find("certificate has expired") != std::string::npos);
  CHECK(log0.find("node 1 joined") != std::string::npos);
  check_losses_close(one, dir / "two" / "metrics.jsonl", steps, 1e-4);
}

TEST_CASE("a daemon with bad TLS files or security.required without TLS "
          "does not start",
          "[security]") {
  auto [dir, data] = scratch_with_data("security_refuse");
  auto pki = make_pki(dir);
  const int port = port_block(42);
  auto good = tls_daemon_config(pki, data.string(), (dir / "run").string(),
                                port, 5);
  auto start_with = [&](const std::string& text, int node) {
    auto config = dir / ("c" + std::to_string(node) + ".yaml");
    write_text(config, text);
    auto r = run(tuttid_bin() + " --config " + config.string() + " --node-rank "
                   + std::to_string(node),
                 30);
    return r;
  };
  auto replaced = [&](std::string text, const std::string& from,
                      const std::string& to) {
    for (auto at = text.find(from); at != std::string::npos;
         at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
    return text;
  };
  const auto d = pki.dir.string();
  // Another CA's certificate.
  auto r = start_with(
    replaced(good, d + "/node-{node}", pki.other.string() + "/node-{node}"), 1);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("unable to get local issuer") != std::string::npos);
  // Expired.
  r = start_with(
    replaced(good, d + "/node-{node}", pki.expired.string() + "/node-{node}"),
    1);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("expired") != std::string::npos);
  // Node 0's certificate on node 1.
  r = start_with(replaced(good, "node-{node}", "node-0"), 1);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("names node 0, but this daemon is node 1")
        != std::string::npos);
  // security.required without tls.
  auto plain = daemon_config(data.string(), (dir / "run").string(), port, 5)
               + "security:\n  required: true\n";
  r = start_with(plain, 0);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("security.required") != std::string::npos);
  // Multi-node without security: starts, with a loud warning.
  auto warned = dir / "plain.yaml";
  write_text(warned, daemon_config(data.string(), (dir / "run").string(), port,
                                   5, {"127.0.0.1", "127.0.0.1"}, 1));
  r = run(tuttid_bin() + " --config " + warned.string() + " --node-rank 0", 30);
  INFO(r.output);
  CHECK(r.output.find("WARNING: no security.tls") != std::string::npos);
}
