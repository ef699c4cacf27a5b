// The rack-aware all-to-all (moe_config.rack_aware_alltoall) in a 4-rank
// job over 2 racks of 2 nodes (cluster_config.nodes[].rack; `tutti run`
// keeps every rank in one process): the losses, auxiliary losses and
// gradient norms are the same bits as the flat all-to-all's, through memory
// and over Gloo (TCP), and the cross-rack bytes per token in metrics.jsonl
// drop, since a token crosses to a rack once however many of its experts
// live there.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "test_support.hpp"

using namespace tutti::testing;

namespace {

constexpr int steps = 5;

// 4 ranks on 4 nodes in 2 racks; top-k of 8 experts; `train`: more
// train lines.
std::string rack_config(const std::string& data, const std::string& run_dir,
                        bool rack_aware, bool tcp, int top_k = 4,
                        const std::string& train = "") {
  auto text = small_config(data, run_dir, 4, steps);
  auto replace = [&](const std::string& from, const std::string& to) {
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
  };
  replace("  nnodes: 1\n  nproc_per_node: 4\n",
          "  nnodes: 4\n  nproc_per_node: 1\n"
          "  local_transport: "
            + std::string(tcp ? "tcp" : "memory")
            + "\n  nodes:\n"
              "    - {host: 127.0.0.1, port: 7391, rack: r0}\n"
              "    - {host: 127.0.0.1, port: 7392, rack: r0}\n"
              "    - {host: 127.0.0.1, port: 7393, rack: r1}\n"
              "    - {host: 127.0.0.1, port: 7394, rack: r1}\n");
  // Two experts per rank, four per token: tokens often choose two in one
  // remote rack (top-2: half of them, when the racks are two).
  replace("  num_experts: 4\n  router_top_k: 2\n",
          "  num_experts: 8\n  router_top_k: " + std::to_string(top_k)
            + "\n  rack_aware_alltoall: "
            + std::string(rack_aware ? "true" : "false") + "\n");
  if (!train.empty()) {
    const std::string anchor = "  log_interval: 10\n";
    REQUIRE(text.find(anchor) != std::string::npos);
    text.insert(text.find(anchor) + anchor.size(), train);
  }
  return text;
}

// Per step: inter_rack bytes / tokens.
std::vector<double> cross_rack_per_token(const std::filesystem::path& path) {
  std::vector<double> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("alltoall_bytes_by_link"))
      out.push_back(j["alltoall_bytes_by_link"]["inter_rack"].get<double>()
                    / j["tokens"].get<double>());
  }
  return out;
}

// The jobs' data: vocab 32, 20,000 tokens.
std::filesystem::path synth_rack_data(const std::filesystem::path& dir) {
  const auto data = dir / "data";
  REQUIRE(run(tutti_bin() + " data synth --out " + data.string()
                + " --vocab 32 --seed 5 --tokens 20000",
              60)
            .status
          == 0);
  return data;
}

struct rack_run {
  std::vector<double> series; // training_series
  double cross_step1 = 0;     // step 1's cross-rack bytes per token
};

// Runs the config `text` as dir/NAME.yaml (its run directory dir/NAME).
rack_run run_rack_job(const std::filesystem::path& dir, const std::string& name,
                      const std::string& text) {
  const auto cfg = dir / (name + ".yaml");
  write_text(cfg, text);
  auto r = run(tutti_bin() + " run " + cfg.string() + " --quiet", 120);
  INFO(name << ": " << tail(r.output));
  REQUIRE(r.status == 0);
  const auto metrics = dir / name / "metrics.jsonl";
  rack_run out{training_series(metrics)};
  REQUIRE(out.series.size() == 4 * steps);
  const auto c = cross_rack_per_token(metrics);
  REQUIRE(c.size() == steps);
  out.cross_step1 = c.front();
  return out;
}

} // namespace

TEST_CASE("rack-aware all-to-all: the flat losses to the bit, fewer "
          "cross-rack bytes per token",
          "[integration]") {
  const auto dir = scratch("rack_alltoall_job");
  const auto data = synth_rack_data(dir);
  std::vector<std::vector<double>> series;
  std::vector<double> cross;
  const char* names[] = {"flat", "rack", "rack-tcp"};
  for (int v = 0; v < 3; ++v) {
    const auto job = run_rack_job(
      dir, names[v],
      rack_config(data.string(), (dir / names[v]).string(), v > 0, v == 2));
    series.push_back(job.series);
    cross.push_back(job.cross_step1);
  }
  CHECK(series[1] == series[0]);
  CHECK(series[2] == series[0]);
  WARN("cross-rack all-to-all bytes per token, step 1: flat "
       << cross[0] << ", rack-aware " << cross[1]);
  CHECK(cross[0] > 0);
  CHECK(cross[1] < cross[0]);
  CHECK(cross[2] == cross[1]);
}

// The relays' sums and the backward through them where the layer's
// activations are rebuilt (full recomputation: the dispatch and combine
// run again before the backward, over micro-batches) and where capacity
// drops slots (a dropped slot adds nothing: the runs the relays sum skip
// it). Top-2: every token whose two kept experts share a remote rack is
// summed there. (Pipeline and tensor parallelism refuse the rack-aware
// all-to-all for now.)
TEST_CASE("rack-aware all-to-all with recomputation and dropped slots: the "
          "flat losses to the bit",
          "[integration]") {
  const auto dir = scratch("rack_alltoall_layouts");
  const auto data = synth_rack_data(dir);
  struct variant {
    const char* name;
    const char* train;
    double capacity_factor;
  };
  for (const auto& v :
       {variant{"recompute", "  micro_batches: 2\n  recompute: full\n", 0},
        variant{"capacity", "", 1.0}}) {
    INFO(v.name);
    std::vector<std::vector<double>> series;
    std::vector<double> cross;
    for (bool rack_aware : {false, true}) {
      const auto name = std::string(v.name) + (rack_aware ? "-rack" : "-flat");
      auto text = rack_config(data.string(), (dir / name).string(), rack_aware,
                              false, 2, v.train);
      const std::string dropless = "  capacity_factor: 0\n";
      REQUIRE(text.find(dropless) != std::string::npos);
      text.replace(text.find(dropless), dropless.size(),
                   "  capacity_factor: " + std::to_string(v.capacity_factor)
                     + "\n");
      const auto job = run_rack_job(dir, name, text);
      series.push_back(job.series);
      cross.push_back(job.cross_step1);
    }
    CHECK(series[1] == series[0]);
    WARN(v.name << ": cross-rack bytes per token, step 1: flat " << cross[0]
                << ", rack-aware " << cross[1]);
    CHECK(cross[1] < cross[0]);
  }
}
