// Topology-aware rescheduling on loopback daemons labelled by rack: a
// 2-node job (node 0 in rack r0, node 1 in rack r1) with two spares
// waiting, one per rack (tuttid --spare --rack R).
//   - node 1 is drained: the spare of rack r1 takes its place (its experts
//     stay in their rack; the event says so), the other spare keeps
//     waiting, and training goes on;
//   - node 1 is drained again: no spare is left in r1, the one of r0 takes
//     it, and the coordinator runs the planner again on the routing
//     statistics it has seen (the event says so, with its figures); the
//     next epoch applies the new plan and training goes on.

#include <catch2/catch.hpp>

#include "daemon_support.hpp"

using namespace tutti::testing;

namespace {

std::unique_ptr<child_process> start_spare(const std::filesystem::path& config,
                                           const std::string& rack,
                                           const std::filesystem::path& log) {
  return std::make_unique<child_process>(
    std::vector<std::string>{tuttid_bin(), "--config", config.string(),
                             "--spare", "--rack", rack},
    log);
}

} // namespace

TEST_CASE("a drained node's experts stay in its rack when a spare is there",
          "[integration]") {
  if (tls_mode()) {
    WARN("SKIPPED: spares need security off (TUTTI_TEST_TLS=1)");
    return;
  }
  auto dir = scratch("placement_reschedule");
  REQUIRE(synth_data(dir / "data"));
  const int port = port_block(71);
  const auto config = dir / "job.yaml";
  const auto metrics = dir / "job" / "metrics.jsonl";
  // Routing statistics every 5 steps, for the planner.
  write_text(config,
             insert_after(daemon_config((dir / "data").string(),
                                        (dir / "job").string(), port, 20000)
                            + "checkpoint:\n  interval_steps: 5\n",
                          "moe_config:\n", "  routing_stats_window: 5\n"));

  auto node0 = start_daemon(config, 0, dir / "node0.log");
  auto node1 = start_daemon(config, 1, dir / "node1.log");
  auto spare_r0 = start_spare(config, "r0", dir / "spare_r0.log");
  auto spare_r1 = start_spare(config, "r1", dir / "spare_r1.log");
  REQUIRE(wait_until([&] { return count_lines(metrics) >= 12; }, 60));
  auto shell = [&](const std::string& cmds) {
    auto r = run(tutti_bin() + " shell --connect " + config.string() + " -c '"
                   + cmds + "'",
                 60);
    INFO(cmds << "\n" << r.output);
    CHECK(r.status == 0);
    return r.output;
  };
  auto running_again = [&](int lines) {
    return wait_until(
      [&] {
        return count_lines(metrics) >= lines
               && has(shell("status"), "state        running");
      },
      60);
  };

  // The spare of rack r1 replaces node 1; the one of r0 still waits.
  CHECK(has(shell("drain 1"), "drained; a waiting spare takes its place"));
  CHECK(node1->wait(30) == 0);
  REQUIRE(wait_until(
    [&] { return has(read_text(dir / "spare_r1.log"), "now node 1"); }, 30));
  REQUIRE(running_again(count_lines(metrics) + 3));
  auto events = shell("events");
  CHECK(has(events, "reschedule_in_rack"));
  CHECK(has(events, "of rack 'r1' left; a spare in the same rack"));
  CHECK(has(events, "placement kept"));
  CHECK_FALSE(has(read_text(dir / "spare_r0.log"), "now node"));

  // Again: only the spare of r0 is left, so the planner runs again.
  CHECK(has(shell("drain 1"), "drained"));
  CHECK(spare_r1->wait(30) == 0);
  REQUIRE(wait_until(
    [&] { return has(read_text(dir / "spare_r0.log"), "now node 1"); }, 30));
  REQUIRE(running_again(count_lines(metrics) + 3));
  events = shell("events");
  CHECK(has(events, "reschedule_replanned"));
  CHECK(has(events, "no spare free in rack 'r1'; a spare in rack 'r0'"));
  CHECK(has(events, "the planner ran again on the statistics of steps"));

  CHECK(has(shell("stop"), "stopping"));
  CHECK(node0->wait(60) == 0);
  CHECK(spare_r0->wait(30) == 0);
  INFO(tail(read_text(dir / "node0.log")));
}
