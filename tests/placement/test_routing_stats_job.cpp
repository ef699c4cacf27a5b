// Routing statistics of a real 2-rank job on topic data: what the store
// keeps per window equals a direct count of the routing decisions (tokens
// per expert match the job's own per-step expert_counts in metrics.jsonl,
// and co-activation and transitions add up to them exactly), `tutti experts
// stats` prints and exports them, and `tutti placement plan` plans from the
// export. With two micro-batches a step, and with a leading dense layer
// (which routes nothing), likewise.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "layout_support.hpp"

namespace fs = std::filesystem;
using namespace tutti::testing;

namespace {

constexpr int world = 2, steps = 4, window = 2, layers = 2, experts = 4,
              top_k = 2;

// expert_counts of each metrics.jsonl line: [step][layer][expert].
std::vector<nlohmann::json> metric_lines(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("expert_counts"))
      out.push_back(j);
  }
  return out;
}

} // namespace

TEST_CASE("routing statistics of a job equal a direct count", "[integration]") {
  const auto dir = scratch("routing_stats");
  const auto data = dir / "data";
  auto synth = run(tutti_bin() + " data synth --out " + data.string()
                     + " --vocab 32 --topics 4 --topic-switch 0.01 --seed 3 "
                       "--tokens 20000",
                   60);
  REQUIRE(synth.status == 0);
  const auto cfg = dir / "job.yaml";
  // Also with two micro-batches a step: the routing is kept micro-batch by
  // micro-batch, and counted so.
  for (const std::string micro : {"2", "1"}) {
    INFO("micro_batches " << micro);
    const auto run_dir = dir / ("run" + micro);
    write_text(cfg,
               insert_after(
                 insert_after(
                   small_config(data.string(), run_dir.string(), world, steps),
                   "  bias_update_rate: 0.001\n",
                   "  routing_stats_window: " + std::to_string(window) + "\n"),
                 "  log_interval: 10\n", "  micro_batches: " + micro + "\n"));
    auto job = run(tutti_bin() + " run " + cfg.string() + " --quiet", 120);
    INFO(tail(job.output));
    REQUIRE(job.status == 0);

    const auto lines = metric_lines(run_dir / "metrics.jsonl");
    REQUIRE(lines.size() == steps);
    for (const char* which : {"all", "last"}) {
      INFO(which);
      const auto json = dir / (std::string(which) + ".json");
      auto stats = run(tutti_bin() + " experts stats " + run_dir.string()
                         + " --window " + which + " --json " + json.string(),
                       60);
      INFO(stats.output);
      REQUIRE(stats.status == 0);
      CHECK(stats.output.find("top co-activated pairs") != std::string::npos);
      CHECK(stats.output.find("heatmap") != std::string::npos);
      const auto s = nlohmann::json::parse(read_text(json));
      const int first = which == std::string("all") ? 1 : steps - window + 1;
      CHECK(s["first_step"] == first);
      CHECK(s["last_step"] == steps);
      long long tokens = 0;
      std::vector<std::vector<long long>> load(layers,
                                               std::vector<long long>(experts));
      for (int step = first; step <= steps; ++step) {
        const auto& m = lines[step - 1];
        tokens += m["tokens"].get<long long>();
        for (int l = 0; l < layers; ++l)
          for (int e = 0; e < experts; ++e)
            load[l][e] += m["expert_counts"][l][e].get<long long>();
      }
      CHECK(s["tokens"].get<long long>() == tokens);
      for (int l = 0; l < layers; ++l)
        for (int e = 0; e < experts; ++e) {
          INFO("layer " << l << " expert " << e);
          CHECK(s["load"][l][e].get<long long>() == load[l][e]);
          // Each token choosing e pairs it with its top_k - 1 other choices,
          // and follows it to top_k experts of the next layer.
          long long pairs = 0, onward = 0, into = 0;
          for (int f = 0; f < experts; ++f) {
            pairs += s["coactivation"][l][e][f].get<long long>();
            if (l + 1 < layers) {
              onward += s["transitions"][l][e][f].get<long long>();
              into += s["transitions"][l][f][e].get<long long>();
            }
          }
          CHECK(pairs == (top_k - 1) * load[l][e]);
          if (l + 1 < layers) {
            CHECK(onward == top_k * load[l][e]);
            CHECK(into == top_k * load[l + 1][e]);
          }
        }
    }
  }

  const auto plan_file = dir / "plan.json";
  auto plan = run(tutti_bin() + " placement plan " + cfg.string() + " --stats "
                    + (dir / "all.json").string() + " --out "
                    + plan_file.string(),
                  60);
  INFO(plan.output);
  REQUIRE(plan.status == 0);
  for (const char* row : {"contiguous", "eplb", "tutti"})
    CHECK(plan.output.find(row) != std::string::npos);
  const auto p = nlohmann::json::parse(read_text(plan_file));
  CHECK(p["format"] == "tutti-placement-1");
  CHECK(p["expert_at"].size() == layers);

  auto wrong = run(tutti_bin() + " placement plan " + cfg.string() + " --stats "
                     + cfg.string(),
                   60);
  CHECK(wrong.status == 2);
  auto missing = run(
    tutti_bin() + " experts stats " + (dir / "nowhere").string(), 60);
  CHECK(missing.status == 2);
}

TEST_CASE("routing statistics count a dense layer as routing nothing",
          "[integration]") {
  const auto dir = scratch("routing_stats_dense");
  const auto data = dir / "data";
  REQUIRE(run(tutti_bin() + " data synth --out " + data.string()
                + " --vocab 32 --seed 3 --tokens 20000",
              60)
            .status
          == 0);
  const auto run_dir = dir / "run";
  const auto cfg = dir / "job.yaml";
  // Three layers, the first a dense MLP; two micro-batches a step.
  write_text(cfg,
             insert_after(
               with_shared_experts(insert_after(
                 small_config(data.string(), run_dir.string(), world, steps),
                 "  bias_update_rate: 0.001\n", "  routing_stats_window: 4\n")),
               "  log_interval: 10\n", "  micro_batches: 2\n"));
  auto job = run(tutti_bin() + " run " + cfg.string() + " --quiet", 120);
  INFO(tail(job.output));
  REQUIRE(job.status == 0);
  const auto json = dir / "all.json";
  auto stats = run(tutti_bin() + " experts stats " + run_dir.string()
                     + " --window all --json " + json.string(),
                   60);
  INFO(stats.output);
  REQUIRE(stats.status == 0);
  const auto s = nlohmann::json::parse(read_text(json));
  const long long tokens = s["tokens"].get<long long>();
  CHECK(tokens > 0);
  for (int l = 0; l < 3; ++l) {
    long long load = 0, onward = 0;
    for (int e = 0; e < experts; ++e) {
      load += s["load"][l][e].get<long long>();
      if (l < 2)
        for (int f = 0; f < experts; ++f)
          onward += s["transitions"][l][e][f].get<long long>();
    }
    INFO("layer " << l);
    CHECK(load == (l == 0 ? 0 : top_k * tokens));
    if (l == 1)
      CHECK(onward == top_k * top_k * tokens);
  }
}
