// tutti diag on 2 loopback daemons: the point-to-point matrix and the
// all-to-all busbw next to raw Gloo; a node throttled by the test hook
// (TUTTI_DIAG_THROTTLE_GBPS) is named as a straggler, and with
// diag.on_start: refuse the job does not start.

#include <catch2/catch.hpp>

#include <csignal>
#include <unistd.h>

#include "daemon_support.hpp"
#include "test_support.hpp"

using namespace tutti::testing;

namespace {

// The 2-node daemon config with the pre-flight check set.
std::string two_node_config(const std::string& data, const std::string& run,
                            int port, int steps, const std::string& on_start) {
  return daemon_config(data, run, port, steps) + "diag:\n  on_start: "
         + on_start + "\n";
}

} // namespace

TEST_CASE("tutti diag names a throttled node", "[integration]") {
  auto dir = scratch("diag");
  auto data = dir / "data";
  REQUIRE(synth_data(data));
  const int port = port_block(21);
  auto cfg = dir / "c.yaml";
  write_text(cfg, two_node_config(data.string(), (dir / "run").string(), port,
                                  100000, "off"));
  auto node0 = start_daemon(cfg, 0, dir / "node0.log");
  // The test hook throttles node 1 like a slow NIC.
  auto node1 = start_daemon(cfg, 1, dir / "node1.log",
                            {"env", "TUTTI_DIAG_THROTTLE_GBPS=0.05"});
  // Retry until both nodes have joined (the coordinator says which are
  // missing until then).
  command_result r;
  for (int i = 0; i < 40; ++i) {
    r = run(tutti_bin() + " diag " + cfg.string(), 120);
    if (r.status != 1)
      break;
    usleep(500000);
  }
  INFO(r.output);
  CHECK(r.status == 3);
  CHECK(r.output.find("point-to-point bandwidth") != std::string::npos);
  CHECK(r.output.find("raw gloo") != std::string::npos);
  CHECK(r.output.find("node 1 (127.0.0.1") != std::string::npos);
  auto line = r.output.substr(r.output.find("  node 1 ("));
  CHECK(line.substr(0, line.find('\n')).find("STRAGGLER")
        != std::string::npos);
  auto line0 = r.output.substr(r.output.find("  node 0 ("));
  CHECK(line0.substr(0, line0.find('\n')).find("ok") != std::string::npos);
  node0->signal(SIGTERM);
  node1->signal(SIGTERM);
  CHECK(node0->wait(60) == 0);
  CHECK(node1->wait(30) == 0);
}

TEST_CASE("diag.on_start: refuse does not start with a straggler",
          "[integration]") {
  auto dir = scratch("diag_refuse");
  auto data = dir / "data";
  REQUIRE(synth_data(data));
  const int port = port_block(22);
  auto cfg = dir / "c.yaml";
  write_text(cfg, two_node_config(data.string(), (dir / "run").string(), port,
                                  20, "refuse"));
  auto node0 = start_daemon(cfg, 0, dir / "node0.log");
  // The test hook throttles node 1 like a slow NIC.
  auto node1 = start_daemon(cfg, 1, dir / "node1.log",
                            {"env", "TUTTI_DIAG_THROTTLE_GBPS=0.05"});
  int s0 = node0->wait(120);
  auto log0 = read_text(dir / "node0.log");
  INFO(log0);
  CHECK(s0 == 1);
  CHECK(log0.find("straggler node 1") != std::string::npos);
  const bool no_steps = !std::filesystem::exists(dir / "run" / "metrics.jsonl")
                        || read_text(dir / "run" / "metrics.jsonl").empty();
  CHECK(no_steps);
  CHECK(node1->wait(60) != -1);
}
