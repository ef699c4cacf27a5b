#pragma once
// Helpers for the tests that train one small model under several layouts
// (micro-batches, optimizer sharding, recomputation) and compare losses.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
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

// The run's checkpoint of `step` exported (`tutti export --format hf` into
// RUN_DIR/export): model.safetensors's bytes, which two layouts that
// trained to the same bits must give alike.
inline std::string exported_model(const std::filesystem::path& run_dir,
                                  int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08d", step);
  const auto out = run_dir / "export";
  std::filesystem::remove_all(out);
  auto r = run(tutti_bin() + " export "
                 + (run_dir / "checkpoints" / name).string()
                 + " --format hf --out " + out.string(),
               60);
  INFO(r.output);
  REQUIRE(r.status == 0);
  return read_text(out / "model.safetensors");
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

// A small_config's model as a Qwen3-MoE: QK-norm, heads of 12 (4 x 12 !=
// 32), gates without renormalisation.
inline std::string as_qwen3(std::string text) {
  text = replace_once(text, "model:\n",
                      "model:\n  family: qwen3_moe\n  head_dim: 12\n");
  return replace_once(text, "  router_top_k: 2\n",
                      "  router_top_k: 2\n  norm_topk_prob: false\n");
}

// small_config's model with multi-head latent attention (4 heads, so as
// many key/value heads): a query latent, interleaved rotary slices,
// values narrower than the keys.
inline std::string as_mla(std::string text) {
  return replace_once(text, "  num_key_value_heads: 2\n",
                      "  num_key_value_heads: 4\n  kv_lora_rank: 12\n"
                      "  q_lora_rank: 10\n  qk_nope_head_dim: 6\n"
                      "  qk_rope_head_dim: 4\n  v_head_dim: 5\n"
                      "  rope_interleave: true\n");
}

// A small_config's model with DeepSeek-V3's feed-forward side: three
// layers, the first a dense SwiGLU MLP of width 48 in place of router and
// experts, the other two with one shared expert (width 64) beside the
// routed ones.
inline std::string with_shared_experts(std::string text) {
  text = replace_once(
    text, "  num_hidden_layers: 2\n",
    "  num_hidden_layers: 3\n  dense_intermediate_size: 48\n");
  return replace_once(text, "  router_top_k: 2\n",
                      "  router_top_k: 2\n  n_shared_experts: 1\n"
                      "  first_k_dense_replace: 1\n");
}

struct job_series {
  std::vector<double> loss, grad_norm;
  std::string output; // what `tutti run --quiet` printed
};

// Runs the job config `text` as dir/NAME.yaml; its metrics' series.
inline job_series train_series(const std::filesystem::path& dir,
                               const std::string& name, const std::string& text,
                               int timeout_s = 120) {
  auto r = run_job(dir / (name + ".yaml"), text, timeout_s);
  auto metrics = dir / name / "metrics.jsonl";
  return {metric_series(metrics, "loss"), metric_series(metrics, "grad_norm"),
          r.output};
}

// `first` trained for 15 steps in dir/NAME, then `then` (the same run
// directory, 30 steps) resuming its checkpoint: the resumed run's series,
// which must say it resumed after step 15.
inline job_series resumed_series(const std::filesystem::path& dir,
                                 const std::string& name,
                                 const std::string& first,
                                 const std::string& then) {
  auto before = train_series(dir, name, first);
  REQUIRE(before.loss.size() == 15);
  auto after = train_series(dir, name, then);
  INFO(name << ": " << after.output);
  REQUIRE(after.loss.size() == 30);
  CHECK(after.output.find("resuming after step 15") != std::string::npos);
  return after;
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

// b's losses and gradient norms are a's to the bit, step by step.
inline void check_same_bits(const job_series& a, const job_series& b,
                            const std::string& what) {
  REQUIRE(a.loss.size() == b.loss.size());
  REQUIRE(a.grad_norm.size() == b.grad_norm.size());
  for (size_t i = 0; i < a.loss.size(); ++i) {
    INFO(what << ", step " << i + 1);
    CHECK(b.loss[i] == a.loss[i]);
    CHECK(b.grad_norm[i] == a.grad_norm[i]);
  }
}

// A checkpoint written at step 15 under one layout, resumed to step 30 on
// world 1 and on (DP2·EP2), against the uninterrupted world-1 run.
// `layout(name, steps)` is the config that writes the checkpoint,
// `resume_on(name, world, steps)` the one that resumes (and, on world 1,
// the uninterrupted run); both must set min_lr = lr, so that the schedule
// after warmup does not depend on train.steps and 15 steps then 15 more
// are the 30-step run. With `exported`, the checkpoint that resumes on
// world 1 is first exported (`tutti export --format hf`), as any other.
// `check(world, whole_losses, resumed_losses, worst_relative)` judges each.
template <class Layout, class ResumeOn, class Check>
void check_resumes_across_layouts(const scratch_job& job,
                                  const std::string& prefix, Layout layout,
                                  ResumeOn resume_on, bool exported,
                                  Check check) {
  auto whole = train_series(job.dir, "whole", resume_on("whole", 1, 30));
  REQUIRE(whole.loss.size() == 30);
  for (int world : {1, 2}) {
    const std::string name = prefix + "_then_w" + std::to_string(world);
    auto first = train_series(job.dir, name, layout(name, 15));
    REQUIRE(first.loss.size() == 15);
    if (exported && world == 1) {
      const auto ckpt = job.dir / name / "checkpoints" / "step-00000015";
      auto e = run(tutti_bin() + " export " + ckpt.string()
                   + " --format hf --out " + (job.dir / "hf").string());
      INFO(e.output);
      CHECK(e.status == 0);
      CHECK(std::filesystem::exists(job.dir / "hf" / "model.safetensors"));
    }
    auto resumed = train_series(job.dir, name, resume_on(name, world, 30));
    INFO(name << ": " << resumed.output);
    REQUIRE(resumed.loss.size() == 30);
    // A run that started afresh would be the uninterrupted run itself.
    CHECK(resumed.output.find("resuming after step 15") != std::string::npos);
    const double worst = worst_relative(whole.loss, resumed.loss);
    WARN("largest relative loss difference, " << name
                                              << " against world 1: " << worst);
    check(world, whole.loss, resumed.loss, worst);
  }
}

} // namespace tutti::testing
