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

// Two daemons of a job with the pre-flight check set to `on_start`, node 1
// throttled by the test hook like a slow NIC.
struct throttled_pair {
  std::filesystem::path dir, config;
  std::unique_ptr<child_process> node0, node1;

  throttled_pair(const std::string& name, int salt, int steps,
                 const std::string& on_start) {
    auto [scratch_dir, data] = scratch_with_data(name);
    dir = scratch_dir;
    config = dir / "c.yaml";
    auto text = daemon_config(data.string(), (dir / "run").string(),
                              port_block(salt), steps);
    const std::string cluster = "cluster_config:\n";
    text.insert(text.find(cluster) + cluster.size(),
                "  inter_rack_gbps: 100000\n");
    write_text(config, text + "diag:\n  on_start: " + on_start + "\n");
    node0 = start_daemon(config, 0, dir / "node0.log");
    node1 = start_daemon(config, 1, dir / "node1.log",
                         {"env", "TUTTI_DIAG_THROTTLE_GBPS=0.05"});
  }
};

} // namespace

TEST_CASE("tutti diag names a throttled node", "[integration]") {
  throttled_pair job("diag", 21, 100000, "off");
  // Retry until both nodes have joined (the coordinator says which are
  // missing until then).
  command_result r;
  for (int i = 0; i < 40; ++i) {
    r = run(tutti_bin() + " diag " + job.config.string(), 120);
    if (r.status != 1)
      break;
    usleep(500000);
  }
  INFO(r.output);
  CHECK(r.status == 3);
  CHECK(r.output.find("point-to-point bandwidth") != std::string::npos);
  // The kernels this machine's CPU runs each precision on.
  CHECK(r.output.find("this machine's CPU: ") != std::string::npos);
  CHECK(r.output.find("serve.weight_dtype bf16: ") != std::string::npos);
  CHECK(r.output.find("raw gloo") != std::string::npos);
  CHECK(r.output.find("node 1 (127.0.0.1") != std::string::npos);
  auto line = r.output.substr(r.output.find("  node 1 ("));
  CHECK(line.substr(0, line.find('\n')).find("STRAGGLER") != std::string::npos);
  auto line0 = r.output.substr(r.output.find("  node 0 ("));
  CHECK(line0.substr(0, line0.find('\n')).find("ok") != std::string::npos);
  // The nodes are in racks r0 and r1: their pairs are inter_rack, measured
  // on loopback far from the 100 Tb/s the config claims.
  CHECK(r.output.find("bandwidth by link class") != std::string::npos);
  auto inter = r.output.substr(r.output.find("  inter_rack "));
  CHECK(inter.substr(0, inter.find('\n')).find("FAR FROM CONFIGURED")
        != std::string::npos);
  auto intra = r.output.substr(r.output.find("  intra_rack "));
  CHECK(intra.substr(0, intra.find('\n')).find("no such pair")
        != std::string::npos);
  job.node0->signal(SIGTERM);
  job.node1->signal(SIGTERM);
  CHECK(job.node0->wait(60) == 0);
  CHECK(job.node1->wait(30) == 0);
}

TEST_CASE("diag.on_start: refuse does not start with a straggler",
          "[integration]") {
  throttled_pair job("diag_refuse", 22, 20, "refuse");
  int s0 = job.node0->wait(120);
  auto log0 = read_text(job.dir / "node0.log");
  INFO(log0);
  CHECK(s0 == 1);
  CHECK(log0.find("straggler node 1") != std::string::npos);
  const auto metrics = job.dir / "run" / "metrics.jsonl";
  const bool no_steps = !std::filesystem::exists(metrics)
                        || read_text(metrics).empty();
  CHECK(no_steps);
  CHECK(job.node1->wait(60) != -1);
}
