// train.gemm_precision: bf16 on the CPU: the GEMMs take bfloat16 inputs
// (oneDNN on the CPU's bf16 units) and keep float32 accumulation, master
// weights, gradients and moments. Against float32 on the same 30 steps: the
// losses stay within 2% and still fall; it repeats to the bit, also under
// full recomputation; and the data-parallel layout (DP2·EP2) follows world
// 1 within the rounding its different GEMM shapes allow. Where the CPU has
// no bf16 units the same config runs float32, to the bit.

#include <catch2/catch.hpp>

#include <cstdio>

#include "layout_support.hpp"
#include "tutti/kernels/stream.hpp"

using namespace tutti::testing;

namespace {

std::string bf16_config(const scratch_job& job, const std::string& name,
                        int world, const std::string& extra = "") {
  return with_train_keys(
    small_config(job.data.string(), (job.dir / name).string(), world, 30),
    "  gemm_precision: bf16\n" + extra);
}

} // namespace

TEST_CASE("bf16 GEMMs train within 2% of float32, repeatably",
          "[integration]") {
  auto job = scratch_with_data("bf16_training");
  const bool bf16_units = tutti::kernels::cpu_bf16_support().runs_bf16;
  std::printf("bf16 GEMMs here: %s (oneDNN %s)\n",
              bf16_units ? "on bf16 units" : "float32 fallback",
              tutti::kernels::cpu_bf16_support().isa);
  const auto fp32 = train_series(
    job.dir, "fp32",
    small_config(job.data.string(), (job.dir / "fp32").string(), 1, 30));
  const auto bf16 = train_series(job.dir, "bf16", bf16_config(job, "bf16", 1));
  REQUIRE(fp32.loss.size() == 30);
  REQUIRE(bf16.loss.size() == 30);
  const double drift = worst_relative(fp32.loss, bf16.loss);
  WARN("largest relative loss difference, bf16 against float32: " << drift);
  CHECK(drift < 0.02);
  CHECK(bf16.loss.back() < bf16.loss.front() - 0.05);
  if (bf16_units)
    CHECK(drift > 0); // the inputs were rounded
  else
    check_same_bits(fp32, bf16, "float32 fallback");

  // Again: the same bits. With two micro-batches, recomputing every layer
  // in the backward gives the bits of keeping its activations.
  check_same_bits(bf16,
                  train_series(job.dir, "bf16_again",
                               bf16_config(job, "bf16_again", 1)),
                  "bf16 again");
  const std::string two = "  micro_batches: 2\n";
  check_same_bits(
    train_series(job.dir, "bf16_mb2", bf16_config(job, "bf16_mb2", 1, two)),
    train_series(
      job.dir, "bf16_full",
      bf16_config(job, "bf16_full", 1, two + "  recompute: full\n")),
    "full recomputation");

  const auto dp2 = train_series(job.dir, "bf16_dp2",
                                bf16_config(job, "bf16_dp2", 2));
  REQUIRE(dp2.loss.size() == 30);
  const double layout = worst_relative(bf16.loss, dp2.loss);
  WARN("largest relative loss difference, bf16 DP2·EP2 against world 1: "
       << layout);
  CHECK(layout < 2e-3);
}
