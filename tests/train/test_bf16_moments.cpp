// train.precision.moments: bf16 (adam_moments.hpp): AdamW's moments stored
// as bfloat16, the rest float32. Against float32 moments on the same 30
// steps the losses stay within 1% and still fall, and it repeats to the
// bit; the distributed optimizer over (PP2·DP2) gives the unsharded bits
// (each moment rounds where it lives, whichever rank holds it); a
// checkpoint holds the moments as floats, so a bf16-moments run resumes
// with float32 moments and the reverse; the rest of the mixed-precision
// state (params, grads, master weights) is refused naming the key.

#include <catch2/catch.hpp>

#include "layout_support.hpp"

using namespace tutti::testing;

namespace {

const std::string bf16_moments = "  precision: {moments: bf16}\n";
const std::string flat = "  min_lr: 0.003\n"; // min_lr = lr: resumable

std::string config(const scratch_job& job, const std::string& name,
                   int world, int steps, const std::string& extra = "") {
  return with_train_keys(
    small_config(job.data.string(), (job.dir / name).string(), world, steps),
    flat + extra);
}

} // namespace

TEST_CASE("bf16 moments train within 1% of float32 moments, repeatably",
          "[integration]") {
  auto job = scratch_with_data("bf16_moments");
  const auto fp32 = train_series(job.dir, "fp32", config(job, "fp32", 1, 30));
  const auto bf16 =
    train_series(job.dir, "bf16", config(job, "bf16", 1, 30, bf16_moments));
  INFO(bf16.output);
  REQUIRE(fp32.loss.size() == 30);
  REQUIRE(bf16.loss.size() == 30);
  const double drift = worst_relative(fp32.loss, bf16.loss);
  WARN("largest relative loss difference, bf16 moments against float32: "
       << drift);
  CHECK(drift > 0); // the moments were rounded
  CHECK(drift < 0.01);
  CHECK(bf16.loss.back() < bf16.loss.front() - 0.05);
  check_same_bits(bf16,
                  train_series(job.dir, "bf16_again",
                               config(job, "bf16_again", 1, 30, bf16_moments)),
                  "bf16 moments again");

  // Sharded over the data-parallel ranks of each stage: the same bits.
  auto pp2dp2 = [&](const std::string& name, const std::string& extra) {
    return with_train_keys(
      model_parallel_config(job, name, 4, "pipeline_model_parallel_size", 2,
                            10),
      "  micro_batches: 2\n" + flat + bf16_moments + extra);
  };
  check_same_bits(train_series(job.dir, "whole", pp2dp2("whole", "")),
                  train_series(job.dir, "sharded",
                               pp2dp2("sharded",
                                      "  optimizer_sharding: true\n")),
                  "PP2·DP2 bf16 moments sharded against unsharded");
}

TEST_CASE("bf16 moments and float32 moments resume each other's checkpoints",
          "[integration]") {
  auto job = scratch_with_data("bf16_moments_resume");
  for (auto [from, to] : {std::pair{bf16_moments, std::string()},
                          std::pair{std::string(), bf16_moments}}) {
    const std::string name = from.empty() ? "fp32_then_bf16" : "bf16_then_fp32";
    auto resumed = resumed_series(job.dir, name, config(job, name, 2, 15, from),
                                  config(job, name, 2, 30, to));
    // Against the run that kept the first half's moments throughout.
    auto whole = train_series(job.dir, name + "_whole",
                              config(job, name + "_whole", 2, 30, from));
    const double drift = worst_relative(whole.loss, resumed.loss);
    WARN(name << ": largest relative loss difference after the switch: "
              << drift);
    CHECK(drift < 0.01);
    for (size_t i = 0; i < 15; ++i)
      CHECK(resumed.loss[i] == whole.loss[i]);
  }
}

TEST_CASE("bf16 parameters, gradients and master weights are refused at "
          "job start, naming the key",
          "[integration]") {
  auto job = scratch_with_data("bf16_state_refused");
  for (const char* key : {"params", "grads"}) {
    auto cfg = job.dir / (std::string(key) + ".yaml");
    write_text(cfg, config(job, key, 1, 2,
                           std::string("  precision: {") + key + ": bf16}\n"));
    auto r = run(tutti_bin() + " run " + cfg.string() + " --quiet", 30);
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find(std::string("train.precision.") + key + ": bf16")
          != std::string::npos);
  }
}
