// `tutti plan`'s memory prediction against what `tutti run` takes. The
// ranks of a one-node job are threads of one process, so the measure is
// the process's peak RSS (GNU time's %M) less a baseline: the same job on
// a tiny model, less the tiny model's own prediction (the runtime, the
// libraries, the BLAS buffers). The prediction for the process is every
// rank's total plus the host copies a checkpoint makes (rank 0's dense and
// expert tensors, the other ranks' experts). Within 10% for (DP2·EP2), the
// same with the distributed optimizer, and with full recomputation.

#include <catch2/catch.hpp>

#include "layout_support.hpp"

using namespace tutti::testing;

namespace {

// A model big enough that its memory dwarfs the process's own.
std::string sized(std::string config) {
  auto set = [&](const std::string& from, const std::string& to) {
    const auto at = config.find(from);
    REQUIRE(at != std::string::npos);
    config.replace(at, from.size(), to);
  };
  set("vocab_size: 32\n  hidden_size: 32\n  intermediate_size: 64\n"
      "  num_hidden_layers: 2\n",
      "vocab_size: 4096\n  hidden_size: 256\n  intermediate_size: 768\n"
      "  num_hidden_layers: 4\n");
  set("  num_experts: 4\n", "  num_experts: 8\n");
  set("  eval_sequences: 8\n", "  eval_sequences: 0\n");
  return config;
}

struct measured {
  double peak_bytes = 0, predicted_bytes = 0;
};

measured measure(const std::filesystem::path& dir, const std::string& name,
                 const std::string& text) {
  auto cfg = dir / (name + ".yaml");
  write_text(cfg, text);
  auto plan = run(tutti_bin() + " plan " + cfg.string() + " --json", 30);
  INFO(name << " plan: " << plan.output);
  REQUIRE(plan.status == 0);
  const auto mem = nlohmann::json::parse(plan.output)["memory"];
  const double world = 2;
  measured out;
  out.predicted_bytes = world * mem["total"].get<double>()
                        + mem["checkpoint_host"].get<double>()
                        + (world - 1)
                            * mem["checkpoint_host_other_ranks"].get<double>();
  auto r = run("/usr/bin/time -f peak_rss_kb=%M " + tutti_bin() + " run "
                 + cfg.string() + " --quiet",
               120);
  INFO(name << " run: " << tail(r.output));
  REQUIRE(r.status == 0);
  const auto at = r.output.rfind("peak_rss_kb=");
  REQUIRE(at != std::string::npos);
  out.peak_bytes = std::stod(r.output.substr(at + 12)) * 1024;
  return out;
}

} // namespace

TEST_CASE("the plan's memory per rank matches the measured peak within 10%",
          "[integration]") {
  auto job = scratch_with_data("plan_memory");
  auto config = [&](const std::string& name, const std::string& keys) {
    return with_train_keys(small_config(job.data.string(),
                                        (job.dir / name).string(), 2, 2),
                           keys);
  };
  const auto tiny = measure(job.dir, "tiny", config("tiny", ""));
  const double baseline = tiny.peak_bytes - tiny.predicted_bytes;
  WARN("baseline (tiny job's peak RSS less its prediction): "
       << baseline / 1e6 << " MB");
  for (auto [name, keys] :
       {std::pair{"dp2_ep2", ""},
        std::pair{"dp2_sharded", "  optimizer_sharding: true\n"},
        std::pair{"dp2_recompute_full", "  recompute: full\n"}}) {
    const auto m = measure(job.dir, name, sized(config(name, keys)));
    const double used = m.peak_bytes - baseline;
    const double error = (m.predicted_bytes - used) / used;
    WARN(name << ": measured " << used / 1e6 << " MB over the baseline, "
              << "planned " << m.predicted_bytes / 1e6 << " MB ("
              << 100 * error << "%)");
    CHECK(std::abs(error) <= 0.10);
  }
}
