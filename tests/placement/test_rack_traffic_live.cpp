// Traffic you can see: a live 4-rank job over 2 racks with the rack-aware
// all-to-all (`tutti run`, metrics.port) shows its all-to-all bytes by link
// class in /metrics (tutti_alltoall_bytes_total{link=...}, checked by
// promtool), in `tutti status` (text and JSON) and the shell's `status`,
// and the cross-rack share alert (alerts.cross_rack_share) fires.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <regex>

#include "daemon_support.hpp"

using namespace tutti::testing;

namespace {

// The value of one sample line of a scrape, or -1.
double sample(const std::string& body, const std::string& series) {
  const auto at = body.find("\n" + series + " ");
  if (at == std::string::npos)
    return -1;
  return std::stod(body.substr(at + series.size() + 2));
}

} // namespace

TEST_CASE("all-to-all bytes by link class in /metrics, status and the shell; "
          "the cross-rack share alert",
          "[integration]") {
  auto job = scratch_with_data("rack_traffic_live");
  const int port = port_block(83, 5), metrics_port = port_block(583, 4);
  auto text = small_config(job.data.string(), (job.dir / "run").string(), 4,
                           100000);
  std::string cluster = "  nnodes: 4\n  nproc_per_node: 1\n  coordinator: "
                        "127.0.0.1:"
                        + std::to_string(port) + "\n  nodes:\n";
  for (int n = 0; n < 4; ++n)
    cluster += "    - {host: 127.0.0.1, port: " + std::to_string(port + 1 + n)
               + ", rack: r" + std::to_string(n / 2) + "}\n";
  text = replace_once(text, "  nnodes: 1\n  nproc_per_node: 4\n", cluster);
  text = insert_after(text, "  router_top_k: 2\n",
                      "  rack_aware_alltoall: true\n");
  text += "checkpoint:\n  interval_steps: 100000\nmetrics:\n  port: "
          + std::to_string(metrics_port)
          + "\nalerts:\n  cross_rack_share: 0.05\n";
  const auto config = job.dir / "job.yaml";
  write_text(config, text);
  const auto log = job.dir / "run.log";
  const auto metrics = job.dir / "run" / "metrics.jsonl";
  auto tutti = start_job(config, log, metrics, 3);
  INFO("tutti run: " << tail(read_text(log)));

  auto body = scrape_checked_by_promtool(metrics_port, job.dir);
  INFO(body);
  const double inter =
    sample(body, "tutti_alltoall_bytes_total{link=\"inter_rack\"}");
  const double intra =
    sample(body, "tutti_alltoall_bytes_total{link=\"intra_rack\"}");
  CHECK(inter > 0);
  CHECK(intra > 0);
  // One rank per node: nothing stays inside a node.
  CHECK(sample(body, "tutti_alltoall_bytes_total{link=\"intra_node\"}") == 0);
  const double share = sample(body, "tutti_alltoall_cross_rack_share");
  CHECK(share > 0.05);
  CHECK(share < 1);
  CHECK(has(body, "tutti_alert_firing{alert=\"cross_rack_share\""));

  auto status = run(tutti_bin() + " status " + config.string(), 60);
  INFO(status.output);
  CHECK(status.status == 0);
  CHECK(std::regex_search(
    status.output,
    std::regex("all-to-all   [0-9.]+ MB/step on links: intra_node 0%, "
               "intra_rack [0-9]+%, inter_rack [0-9]+%")));
  CHECK(has(status.output, "cross-rack   "));
  CHECK(has(status.output, "cross_rack_share"));
  auto json = run(tutti_bin() + " status " + config.string() + " --json", 60);
  INFO(json.output);
  REQUIRE(json.status == 0);
  const auto j = nlohmann::json::parse(json.output, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j["alltoall_bytes_by_link"]["inter_rack"].get<double>() > 0);
  CHECK(j["cross_rack_bytes_per_token"].get<double>() > 0);

  auto shell = run(
    tutti_bin() + " shell --connect " + config.string() + " -c status", 60);
  INFO(shell.output);
  CHECK(shell.status == 0);
  CHECK(has(shell.output, "MB/step on links"));

  auto stop = run(
    tutti_bin() + " shell --connect " + config.string() + " --yes -c stop", 60);
  INFO(stop.output);
  CHECK(stop.status == 0);
  CHECK(tutti->wait(120) == 0);
}
