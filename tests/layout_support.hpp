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

struct job_series {
  std::vector<double> loss, grad_norm;
};

// Runs the job config `text` as dir/NAME.yaml; its metrics' series.
inline job_series train_series(const std::filesystem::path& dir,
                               const std::string& name,
                               const std::string& text, int timeout_s = 120) {
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
