// A service across two `tuttid` daemons stopped as a scheduler stops it:
// SIGTERM to either daemon drains the whole service. Requests already
// taken finish whole, new ones get 503 (or find the front closed once the
// drain is over), and both daemons exit 0 within the drain timeout, for
// each daemon that gets the signal (node 1 holding experts only, or
// sequences too with data_parallel_attention), and the same under mutual
// TLS with two ranks a daemon (node 0's second rank following its first).
// The
// rendezvous port shrugs off a header that would crash CAF's middleman;
// under TLS it lets in only the cluster CA's node certificates.

#include <catch2/catch.hpp>

#include <httplib.h>

#include <csignal>

#include "daemon_support.hpp"
#include "serve_http_support.hpp"
#include "security_support.hpp"
#include "serve_test_support.hpp"

using namespace tutti;
using namespace tutti::testing;
using steady = std::chrono::steady_clock;

namespace {

void drain_when_signalled(int signalled_node, bool tls, int ranks = 1,
                          bool sequences_everywhere = false) {
  auto root = scratch("serve_drain_" + std::to_string(signalled_node)
                      + (tls ? "_tls" : "")
                      + (sequences_everywhere ? "_dp" : ""));
  INFO(ranks << " ranks a daemon"
             << (sequences_everywhere ? ", data_parallel_attention" : ""));
  const auto model = write_random_export(
    root / "model", serve_test_config(256, 64, 128, 2, 4, 2, 4, 2, 128), 53);
  const int base = port_block(57, 2);
  const int http = base, rendezvous = base + 1;
  std::string security;
  std::optional<test_pki> pki;
  if (tls) {
    pki = make_pki(root);
    const auto d = pki->dir.string();
    security = "security:\n  required: true\n  handshake_timeout_s: 2\n"
               "  tls:\n    ca: " + d + "/ca.crt\n    cert: " + d
               + "/node-{node}.crt\n    key: " + d + "/node-{node}.key\n";
  }
  write_text(root / "two.yaml",
             serve_yaml(model, http,
                        "  nodes: [127.0.0.1, 127.0.0.1]\n"
                        "  rendezvous_port: " + std::to_string(rendezvous)
                          + "\n  drain_timeout_s: 15\n  ep_size: "
                          + std::to_string(ranks) + "\n"
                          + (sequences_everywhere
                               ? "  data_parallel_attention: true\n"
                               : ""))
               + security);
  auto node1 = start_daemon(root / "two.yaml", 1, root / "node1.log");
  auto node0 = start_daemon(root / "two.yaml", 0, root / "node0.log");
  INFO("node 0: " << read_text(root / "node0.log") << "\nnode 1: "
                  << read_text(root / "node1.log"));
  REQUIRE(wait_until([&] { return serve_ready(http); }, 30));
  // The rendezvous port is a guarded daemon port: a BASP header that
  // would crash CAF's middleman costs the prober its connection only.
  {
    socket_guard probe(tcp_connect("127.0.0.1", rendezvous));
    REQUIRE(probe.fd >= 0);
    send_bytes(probe.fd, basp_header(1, 0, 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  REQUIRE(node0->running());
  REQUIRE(serve_ready(http));
  if (pki) {
    // Node certificates of the cluster CA get through; another CA's not.
    const auto ca = (pki->dir / "ca.crt").string();
    CHECK(tls_peer_accepted(rendezvous, ca, (pki->dir / "node-1.crt").string(),
                            (pki->dir / "node-1.key").string()));
    CHECK_FALSE(tls_peer_accepted(rendezvous, ca,
                                  (pki->other / "node-1.crt").string(),
                                  (pki->other / "node-1.key").string()));
  }
  // In the clear, each daemon says so when it starts.
  CHECK(has(read_text(root / "node0.log"), "WARNING: no security.tls") == !pki);

  completion_load load(http, 3, 48);
  REQUIRE(wait_until([&] { return load.count() >= 3; }, 60));
  const auto signalled = steady::now();
  (signalled_node == 0 ? node0 : node1)->signal(SIGTERM);
  const int status0 = node0->wait(40), status1 = node1->wait(40);
  const auto exited = steady::now();
  load.end();
  CHECK(status0 == 0);
  CHECK(status1 == 0);
  CHECK(exited - signalled < std::chrono::seconds(20));

  int drained = 0, refused = 0;
  for (const auto& o : load.finished) {
    INFO("a request answered " << o.status);
    // Every answer is a whole completion, a 503, or none (front closed):
    // no request is cut off or fails.
    CHECK((o.whole || o.status == 503 || o.status == 0));
    drained += o.whole && o.start < signalled && o.end > signalled;
    refused += o.status == 503;
  }
  // The requests in flight at the signal finished: the drain waited.
  CHECK(drained >= 1);
  INFO(refused << " refused during the drain");
}

} // namespace

TEST_CASE("SIGTERM to node 0 drains the service; both daemons exit 0",
          "[integration][fault]") {
  drain_when_signalled(0, false);
}

TEST_CASE("SIGTERM to node 1 drains the service; both daemons exit 0",
          "[integration][fault]") {
  drain_when_signalled(1, false);
}

TEST_CASE("SIGTERM to node 1 holding sequences (data_parallel_attention) "
          "drains the service; both daemons exit 0",
          "[integration][fault]") {
  drain_when_signalled(1, false, 1, true);
}

TEST_CASE("under mutual TLS, 2 ranks a daemon, SIGTERM to either daemon "
          "drains the service",
          "[integration][fault][security]") {
  drain_when_signalled(0, true, 2);
  drain_when_signalled(1, true, 2);
}
