// `tutti run` is a full node: with metrics.port it serves /metrics (checked
// by promtool), and the client commands a daemon answers (status, shell,
// logs, chaos) reach it on loopback through the config.

#include <catch2/catch.hpp>

#include "daemon_support.hpp"

using namespace tutti::testing;

TEST_CASE("tutti run serves /metrics and answers client commands",
          "[ops][run_node]") {
  auto job = scratch_with_data("ops_run_node");
  const int port = port_block(71), metrics_port = port_block(571, 1);
  const auto config = job.dir / "job.yaml";
  write_text(
    config,
    insert_after(
      small_config(job.data.string(), (job.dir / "run").string(), 2, 100000),
      "  nnodes: 1\n",
      "  coordinator: 127.0.0.1:" + std::to_string(port) + "\n")
      + "checkpoint:\n  interval_steps: 100000\nmetrics:\n  port: "
      + std::to_string(metrics_port) + "\n");
  const auto log = job.dir / "run.log";
  auto tutti = start_job(config, log, job.dir / "run" / "metrics.jsonl", 3);
  INFO("tutti run: " << tail(read_text(log)));

  auto body = scrape_checked_by_promtool(metrics_port, job.dir);
  INFO(body);
  CHECK(has(body, "\ntutti_job_step "));
  CHECK(has(body, "tutti_daemon_ranks_running{node=\"0\"}"));

  auto shell = run(
    tutti_bin() + " shell --connect " + config.string() + " -c status", 60);
  INFO(shell.output);
  CHECK(shell.status == 0);
  CHECK(has(shell.output, "state        running"));
  // The shell's config versions, from the job's store.
  auto versions = run(tutti_bin() + " shell --connect " + config.string()
                        + " -c 'config history'",
                      60);
  INFO(versions.output);
  CHECK(versions.status == 0);
  CHECK(has(versions.output, "version 1"));
  CHECK(has(versions.output, "start"));
  // tutti diag's environment table (one node: nothing to probe between
  // nodes, so it exits 1 after the table).
  auto diag = run(tutti_bin() + " diag " + config.string(), 90);
  INFO(diag.output);
  CHECK(has(diag.output, "environment (diag.environment: refuse)"));
  CHECK(has(diag.output, "build_id"));
  CHECK(has(diag.output, "data/train-00000.tok"));
  auto status = run(tutti_bin() + " status " + config.string(), 60);
  INFO(status.output);
  CHECK(status.status == 0);
  auto logs = run(tutti_bin() + " logs " + config.string() + " --lines 3", 60);
  INFO(logs.output);
  CHECK(logs.status == 0);
  CHECK(has(logs.output, "\"time\""));
  auto chaos = run(
    tutti_bin() + " chaos " + config.string() + " kill_expert --rank 1", 60);
  INFO(chaos.output);
  CHECK(chaos.status == 0);

  auto stop = run(
    tutti_bin() + " shell --connect " + config.string() + " --yes -c stop", 60);
  INFO(stop.output);
  CHECK(stop.status == 0);
  CHECK(tutti->wait(120) == 0);
}
