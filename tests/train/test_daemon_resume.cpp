// Daemons resume by themselves: a 2-daemon job stopped with SIGTERM ends at
// a step boundary with a checkpoint; started again with the same command,
// node 0 finds it in its store and the job finishes with the same losses as
// the same job run through without a stop.

#include <catch2/catch.hpp>

#include <csignal>

#include "daemon_support.hpp"
#include "test_support.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

TEST_CASE("a stopped daemon job resumes where it stopped", "[fault]") {
  auto [dir, data] = scratch_with_data("daemon_resume");
  const int steps = 200;
  auto whole = run_one_process(dir, data, steps);

  const int port = port_block(71);
  auto cfg = dir / "two.yaml";
  write_text(cfg,
             daemon_config(data.string(), (dir / "two").string(), port, steps));
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

  check_losses_close(whole, metrics, steps, 1e-6);
}
