// Node daemons: 2 tuttid x 2 ranks on loopback train exactly as the same
// config in one process; a daemon with a different config is refused and
// told the first differing key.

#include <catch2/catch.hpp>

#include <cmath>

#include "daemon_support.hpp"
#include "test_support.hpp"

using namespace tutti::testing;

namespace {

int free_port_base() {
  // Spread concurrent test runs over ports; 7100 + pid-derived offset.
  return 20000 + (getpid() % 2000) * 10;
}

std::string cluster_config(const std::string& data, const std::string& run,
                           int port, int nnodes, int steps,
                           int hidden = 32) {
  auto text = small_config(data, run, 4, steps);
  auto replace = [&](const std::string& from, const std::string& to) {
    text.replace(text.find(from), from.size(), to);
  };
  replace("  nnodes: 1\n  nproc_per_node: 4\n",
          "  nnodes: " + std::to_string(nnodes) + "\n  nproc_per_node: "
            + std::to_string(4 / nnodes) + "\n  coordinator: 127.0.0.1:"
            + std::to_string(port) + "\n  join_timeout_s: 20\n");
  replace("hidden_size: 32", "hidden_size: " + std::to_string(hidden));
  return text;
}

} // namespace

TEST_CASE("2 daemons x 2 ranks train like 4 ranks in one process",
          "[integration]") {
  auto dir = scratch("daemons");
  auto data = dir / "data";
  REQUIRE(run(tutti_bin() + " data synth --out " + data.string()
              + " --vocab 32 --seed 5 --tokens 60000")
            .status
          == 0);
  const int port = free_port_base();

  auto one = dir / "one.yaml";
  write_text(one, cluster_config(data.string(), (dir / "one").string(), port,
                                 1, 30));
  auto single = run(tutti_bin() + " run " + one.string() + " --quiet", 300);
  INFO(single.output);
  REQUIRE(single.status == 0);

  auto two = dir / "two.yaml";
  write_text(two, cluster_config(data.string(), (dir / "two").string(), port,
                                 2, 30));
  auto node1 = start_daemon(two, 1, dir / "node1.log");
  auto node0 = start_daemon(two, 0, dir / "node0.log");
  int s0 = node0->wait(300), s1 = node1->wait(60);
  INFO("node0: " << read_text(dir / "node0.log"));
  INFO("node1: " << read_text(dir / "node1.log"));
  REQUIRE(s0 == 0);
  REQUIRE(s1 == 0);

  auto a = metric_series(dir / "one" / "metrics.jsonl", "loss");
  auto b = metric_series(dir / "two" / "metrics.jsonl", "loss");
  REQUIRE(a.size() == 30);
  REQUIRE(b.size() == 30);
  for (size_t s = 0; s < a.size(); ++s) {
    INFO("step " << s + 1 << ": " << b[s] << " vs " << a[s]);
    CHECK(std::abs(b[s] - a[s]) / std::abs(a[s]) <= 1e-4);
  }
}

TEST_CASE("a daemon with a different config is refused by name",
          "[integration]") {
  auto dir = scratch("daemons_mismatch");
  auto data = dir / "data";
  REQUIRE(run(tutti_bin() + " data synth --out " + data.string()
              + " --vocab 32 --seed 5 --tokens 60000")
            .status
          == 0);
  const int port = free_port_base() + 5;
  auto good = dir / "good.yaml";
  auto bad = dir / "bad.yaml";
  write_text(good, cluster_config(data.string(), (dir / "run").string(), port,
                                  2, 5));
  write_text(bad, cluster_config(data.string(), (dir / "run").string(), port,
                                 2, 5, 64));
  auto node0 = start_daemon(good, 0, dir / "node0.log");
  auto node1 = start_daemon(bad, 1, dir / "node1.log");
  int s1 = node1->wait(60);
  auto log1 = read_text(dir / "node1.log");
  INFO(log1);
  CHECK(s1 != 0);
  CHECK(log1.find("model.hidden_size") != std::string::npos);
  // The coordinator keeps waiting for a matching node 1 until its join
  // timeout, then fails the job naming the missing node.
  int s0 = node0->wait(60);
  auto log0 = read_text(dir / "node0.log");
  INFO(log0);
  CHECK(s0 == 1);
  CHECK(log0.find("missing node 1") != std::string::npos);
}
