// The rack-aware all-to-all (moe_config.rack_aware_alltoall) in a 4-rank
// job over 2 racks of 2 nodes (cluster_config.nodes[].rack; `tutti run`
// keeps every rank in one process): the losses, auxiliary losses and
// gradient norms are the same bits as the flat all-to-all's, through memory
// and over Gloo (TCP), and the cross-rack bytes per token in metrics.jsonl
// drop, since a token crosses to a rack once however many of its experts
// live there. The same on 8 ranks under TP2, PP2 and TP2·PP2.

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
  // Two experts per rank, four per token: tokens often choose two in one
  // remote rack (top-2: half of them, when the racks are two).
  auto text = two_rack_config(data, run_dir, steps, 7391, rack_aware, tcp,
                              top_k);
  if (!train.empty())
    text = insert_after(text, "  log_interval: 10\n", train);
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

// The jobs' data: vocab 32, 20,000 tokens (`extra`: more synth options).
std::filesystem::path synth_rack_data(const std::filesystem::path& dir,
                                      const std::string& extra = "") {
  const auto data = dir / "data";
  REQUIRE(run(tutti_bin() + " data synth --out " + data.string()
                + " --vocab 32 --seed 5 --tokens 20000" + extra,
              60)
            .status
          == 0);
  return data;
}

struct rack_run {
  std::vector<double> series; // training_series
  double cross_step1 = 0;     // step 1's cross-rack bytes per token
  double cross_mean = 0;      // the steps' mean of it
};

// Runs the config `text` as dir/NAME.yaml (its run directory dir/NAME),
// `steps` steps after `after` (a run directory resumed from there).
rack_run run_rack_job(const std::filesystem::path& dir, const std::string& name,
                      const std::string& text, int after = 0) {
  run_job(dir / (name + ".yaml"), text, 120);
  const auto metrics = dir / name / "metrics.jsonl";
  rack_run out{training_series(metrics)};
  REQUIRE(out.series.size() == size_t(4 * (after + steps)));
  const auto c = cross_rack_per_token(metrics);
  REQUIRE(c.size() == size_t(after + steps));
  out.cross_step1 = c[after];
  for (int i = after; i < after + steps; ++i)
    out.cross_mean += c[i] / steps;
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
// summed there.
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
      text = replace_once(
        text, "  capacity_factor: 0\n",
        "  capacity_factor: " + std::to_string(v.capacity_factor) + "\n");
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

// Tensor and pipeline parallelism: 8 ranks on 8 nodes, racks alternating
// by pairs of nodes, so every EP group (a TP index's data-parallel ranks,
// TP2 apart, or a stage's) spans both racks.
TEST_CASE("rack-aware all-to-all under tensor and pipeline parallelism: "
          "the flat losses to the bit, fewer cross-rack bytes per token",
          "[integration]") {
  const auto dir = scratch("rack_alltoall_model_parallel");
  const auto data = synth_rack_data(dir);
  auto config = [&](const std::string& name, const std::string& layout,
                    bool rack_aware) {
    auto text = small_config(data.string(), (dir / name).string(), 8, steps);
    std::string nodes;
    for (int n = 0; n < 8; ++n)
      nodes += "    - {host: 127.0.0.1, port: " + std::to_string(7491 + n)
               + ", rack: r" + std::to_string(n / 2 % 2) + "}\n";
    text = replace_once(text, "  nnodes: 1\n  nproc_per_node: 8\n",
                        "  nnodes: 8\n  nproc_per_node: 1\n  nodes:\n" + nodes);
    text = replace_once(text, "  ep_size: 8\n", layout);
    return replace_once(text, "  num_experts: 4\n  router_top_k: 2\n",
                        "  num_experts: 8\n  router_top_k: 4\n"
                        "  rack_aware_alltoall: "
                          + std::string(rack_aware ? "true" : "false") + "\n");
  };
  struct variant {
    const char* name;
    const char* layout;
  };
  for (const auto& v :
       {variant{"tp2", "  ep_size: 4\n  tensor_model_parallel_size: 2\n"},
        variant{"pp2", "  ep_size: 4\n  pipeline_model_parallel_size: 2\n"},
        variant{"tp2pp2", "  ep_size: 2\n  tensor_model_parallel_size: 2\n"
                          "  pipeline_model_parallel_size: 2\n"}}) {
    INFO(v.name);
    std::vector<std::vector<double>> series;
    std::vector<double> cross;
    for (bool rack_aware : {false, true}) {
      const auto name = std::string(v.name) + (rack_aware ? "-rack" : "-flat");
      const auto job = run_rack_job(dir, name,
                                    config(name, v.layout, rack_aware));
      series.push_back(job.series);
      cross.push_back(job.cross_step1);
    }
    CHECK(series[1] == series[0]);
    WARN(v.name << ": cross-rack bytes per token, step 1: flat " << cross[0]
                << ", rack-aware " << cross[1]);
    CHECK(cross[0] > 0);
    CHECK(cross[1] < cross[0]);
  }
}

// data.rack_affinity: each step's windows go to the rack (then the rank)
// holding most of their tokens' experts, as the plan predicts them from
// the model on its own (`tutti placement plan --method affinity --model`,
// on a checkpoint exported). A model pretrained on topic data continues 5
// steps with that plan, dealt by the batch and by affinity: fewer bytes
// cross the racks, and the numbers stay the same within float rounding
// (which rank sums which window's gradients changes, nothing else). A
// config that asks for it without such a plan is refused in one line.
TEST_CASE("rack affinity: windows start in the rack of their experts, fewer "
          "cross-rack bytes, the same losses within rounding",
          "[integration]") {
  const auto dir = scratch("rack_affinity_job");
  const auto data = synth_rack_data(dir, " --topics 4");
  constexpr int pretrain = 100;
  // Rack-aware, top-2; `total` steps, a checkpoint at the pretraining's end.
  auto config = [&](const std::string& name, int total) {
    auto text = insert_after(
      rack_config(data.string(), (dir / name).string(), true, false, 2),
      "  log_interval: 10\n",
      "checkpoint:\n  interval_steps: " + std::to_string(pretrain) + "\n");
    return replace_once(text, "  steps: " + std::to_string(steps) + "\n",
                        "  steps: " + std::to_string(total) + "\n");
  };
  // Pretraining, its routing statistics, and its checkpoint exported.
  const auto base = dir / "pretrain.yaml";
  write_text(base, insert_after(config("pretrain", pretrain),
                                "  rack_aware_alltoall: true\n",
                                "  routing_stats_window: 20\n"));
  auto r = run(tutti_bin() + " run " + base.string() + " --quiet", 120);
  INFO(tail(r.output));
  REQUIRE(r.status == 0);
  const auto stats = dir / "stats.json";
  const auto model = dir / "export";
  for (const auto& command :
       {" experts stats " + (dir / "pretrain").string() + " --json "
          + stats.string(),
        " export " + (dir / "pretrain" / "checkpoints").string() + "/step-"
          + std::string(8 - std::to_string(pretrain).size(), '0')
          + std::to_string(pretrain) + " --format hf --out "
          + model.string()}) {
    r = run(tutti_bin() + command, 60);
    INFO(command << ": " << r.output);
    REQUIRE(r.status == 0);
  }
  const auto plan = dir / "affinity.plan";
  r = run(tutti_bin() + " placement plan " + base.string() + " --stats "
            + stats.string() + " --method affinity --model " + model.string()
            + " --out " + plan.string(),
          60);
  INFO(r.output);
  REQUIRE(r.status == 0);
  auto placed = [&](const std::string& name) {
    std::filesystem::copy(dir / "pretrain", dir / name,
                          std::filesystem::copy_options::recursive);
    return insert_after(config(name, pretrain + steps),
                        "  rack_aware_alltoall: true\n",
                        "  placement: " + plan.string() + "\n");
  };
  auto affine = [&](const std::string& text) {
    return insert_after(text, "data:\n  dir: " + data.string() + "\n",
                        "  rack_affinity: true\n");
  };
  const auto batch = run_rack_job(dir, "placed", placed("placed"), pretrain);
  const auto dealt = run_rack_job(dir, "affinity", affine(placed("affinity")),
                                  pretrain);
  WARN("cross-rack bytes per token, mean of 5 steps: the batch's deal "
       << batch.cross_mean << ", by affinity " << dealt.cross_mean);
  CHECK(dealt.cross_mean < 0.9 * batch.cross_mean);
  REQUIRE(dealt.series.size() == batch.series.size());
  for (size_t i = 0; i < batch.series.size(); ++i) {
    INFO("value " << i);
    CHECK(std::abs(dealt.series[i] - batch.series[i])
          <= 1e-4 * std::max(1.0, std::abs(batch.series[i])));
  }

  // Without a placement, or with one that has no token_experts: refused.
  write_text(dir / "no-plan.yaml", affine(config("no-plan", steps)));
  r = run(tutti_bin() + " run " + (dir / "no-plan.yaml").string(), 60);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK_THAT(r.output, Catch::Contains("data.rack_affinity")
                         && Catch::Contains("moe_config.placement"));
  const auto bare = dir / "tutti.plan";
  REQUIRE(run(tutti_bin() + " placement plan " + base.string() + " --stats "
                + stats.string() + " --out " + bare.string(),
              60)
            .status
          == 0);
  write_text(dir / "bare-plan.yaml",
             affine(insert_after(config("bare-plan", steps),
                                 "  rack_aware_alltoall: true\n",
                                 "  placement: " + bare.string() + "\n")));
  r = run(tutti_bin() + " run " + (dir / "bare-plan.yaml").string(), 60);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK_THAT(r.output, Catch::Contains("has no token_experts"));
}
