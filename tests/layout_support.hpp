#pragma once
// Helpers for the tests that train one small model under several layouts
// (micro-batches, optimizer sharding, recomputation) and compare losses.

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace tutti::testing {

// Adds `lines` (indented "  key: value\n" lines) to the train section of a
// small_config.
inline std::string with_train_keys(std::string config,
                                   const std::string& lines) {
  const std::string anchor = "  log_interval: 10\n";
  const auto at = config.find(anchor);
  REQUIRE(at != std::string::npos);
  config.insert(at + anchor.size(), lines);
  return config;
}

// small_config on `world` ranks with `parallel_key: size` in
// cluster_config (tensor_ or pipeline_model_parallel_size): the experts
// spread over the world / size data-parallel ranks.
inline std::string model_parallel_config(const scratch_job& job,
                                         const std::string& name, int world,
                                         const std::string& parallel_key,
                                         int size, int steps) {
  auto text = small_config(job.data.string(), (job.dir / name).string(), world,
                           steps);
  const auto ep_line = "  ep_size: " + std::to_string(world) + "\n";
  const auto at = text.find(ep_line);
  REQUIRE(at != std::string::npos);
  text.replace(at, ep_line.size(),
               "  ep_size: " + std::to_string(world / size) + "\n  "
                 + parallel_key + ": " + std::to_string(size) + "\n");
  return text;
}

// small_config on `world` ranks with tensor and pipeline parallelism
// together: `tp` ranks split each layer, `pp` stages split the layers, the
// experts spread over the world / (tp * pp) data-parallel ranks.
inline std::string tp_pp_config(const scratch_job& job, const std::string& name,
                                int world, int tp, int pp, int steps) {
  auto text = model_parallel_config(job, name, world,
                                    "tensor_model_parallel_size", tp, steps);
  const auto from = "  ep_size: " + std::to_string(world / tp) + "\n";
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(),
               "  ep_size: " + std::to_string(world / (tp * pp))
                 + "\n  pipeline_model_parallel_size: " + std::to_string(pp)
                 + "\n");
  return text;
}

struct job_series {
  std::vector<double> loss, grad_norm;
};

// Runs the job config `text` as dir/NAME.yaml; its metrics' series.
inline job_series train_series(const std::filesystem::path& dir,
                               const std::string& name, const std::string& text,
                               int timeout_s = 120) {
  auto cfg = dir / (name + ".yaml");
  write_text(cfg, text);
  auto r = run(tutti_bin() + " run " + cfg.string() + " --quiet", timeout_s);
  INFO(name << ": " << tail(r.output));
  REQUIRE(r.status == 0);
  auto metrics = dir / name / "metrics.jsonl";
  return {metric_series(metrics, "loss"), metric_series(metrics, "grad_norm")};
}

// The largest relative difference of b from a, step by step (same length).
inline double worst_relative(const std::vector<double>& a,
                             const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(b[i] - a[i]) / std::abs(a[i]));
  return worst;
}

} // namespace tutti::testing
