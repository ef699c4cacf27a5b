// Daemons resume by themselves: a 2-daemon job stopped with SIGTERM ends at
// a step boundary with a checkpoint; started again with the same command,
// node 0 finds it in its store and the job finishes with the same losses as
// the same job run through without a stop.

#include <catch2/catch.hpp>

#include <csignal>
#include <cmath>

#include "daemon_support.hpp"
#include "test_support.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

TEST_CASE("a stopped daemon job resumes where it stopped", "[fault]") {
  auto dir = scratch("daemon_resume");
  auto data = dir / "data";
  REQUIRE(synth_data(data));
  const int steps = 200;
  auto one = dir / "one.yaml";
  write_text(one, one_process_config(data.string(), (dir / "one").string(),
                                     steps));
  auto whole = run(tutti_bin() + " run " + one.string() + " --quiet", 300);
  INFO(whole.output);
  REQUIRE(whole.status == 0);

  const int port = port_block(71);
  auto cfg = dir / "two.yaml";
  write_text(cfg, daemon_config(data.string(), (dir / "two").string(), port,
                                steps));
  auto metrics = dir / "two" / "metrics.jsonl";
  {
    auto node0 = start_daemon(cfg, 0, dir / "first0.log");
    auto node1 = start_daemon(cfg, 1, dir / "first1.log");
    REQUIRE(wait_until([&] { return count_lines(metrics) >= 20; }, 120));
    node1->signal(SIGTERM);
    CHECK(node1->wait(60) == 0);
    CHECK(node0->wait(60) == 0);
  }
  const int stopped_at = count_lines(metrics);
  INFO("stopped after step " << stopped_at);
  REQUIRE(stopped_at < steps);

  auto node0 = start_daemon(cfg, 0, dir / "second0.log");
  auto node1 = start_daemon(cfg, 1, dir / "second1.log");
  CHECK(node0->wait(300) == 0);
  CHECK(node1->wait(60) == 0);
  auto log0 = read_text(dir / "second0.log");
  INFO(log0);
  CHECK(log0.find("resuming after step " + std::to_string(stopped_at))
        != std::string::npos);

  auto a = metric_series(dir / "one" / "metrics.jsonl", "loss");
  auto b = metric_series(metrics, "loss");
  REQUIRE(a.size() == steps);
  REQUIRE(b.size() == steps);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s + 1);
    CHECK(std::abs(b[s] - a[s]) <= 1e-6 * std::abs(a[s]));
  }
}
