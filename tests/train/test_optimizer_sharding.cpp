// The distributed optimizer (train.optimizer_sharding, ZeRO-1): dense
// gradients reduce-scattered over the data-parallel ranks, each rank's slice
// of AdamW state updated there, the weights all-gathered.
// - (DP2·EP2) sharded gives the losses of world 1 within 1e-4 relative over
//   30 steps, and those of (DP2·EP2) unsharded to the bit: each slice is
//   summed in member order, as the all-reduce does, and the gradient norm
//   is summed slice by slice in member order either way.
// - Checkpoints hold the whole optimizer state: a sharded job resumes
//   unsharded, and an unsharded one sharded, with the uninterrupted run's
//   losses to the bit.

#include <catch2/catch.hpp>

#include "layout_support.hpp"

using namespace tutti::testing;

namespace {

std::string sharded_config(const scratch_job& job, const std::string& name,
                           int world, int steps, bool sharded,
                           const std::string& extra = "") {
  return with_train_keys(small_config(job.data.string(),
                                      (job.dir / name).string(), world, steps),
                         std::string("  optimizer_sharding: ")
                           + (sharded ? "true" : "false") + "\n" + extra);
}

} // namespace

TEST_CASE("the distributed optimizer gives the unsharded losses",
          "[integration]") {
  auto job = scratch_with_data("optimizer_sharding");
  auto world1 = train_series(job.dir, "w1", sharded_config(job, "w1", 1, 30, false));
  auto plain = train_series(job.dir, "dp2", sharded_config(job, "dp2", 2, 30, false));
  auto sharded = train_series(job.dir, "dp2_sharded",
                              sharded_config(job, "dp2_sharded", 2, 30, true));
  REQUIRE(world1.loss.size() == 30);
  const double worst = worst_relative(world1.loss, sharded.loss);
  WARN("largest relative loss difference, DP2 sharded against world 1: "
       << worst);
  CHECK(worst <= 1e-4);
  CHECK(sharded.loss == plain.loss);
  CHECK(sharded.grad_norm == plain.grad_norm);
  CHECK(world1.loss.back() < world1.loss.front() - 0.05);
}

TEST_CASE("checkpoints resume across optimizer sharding", "[integration]") {
  auto job = scratch_with_data("optimizer_sharding_resume");
  // min_lr = lr: the schedule after warmup does not depend on train.steps,
  // so 15 steps and then 15 more are the 30-step run.
  const std::string flat = "  min_lr: 0.003\n";
  auto whole = train_series(job.dir, "whole",
                            sharded_config(job, "whole", 2, 30, false, flat));
  REQUIRE(whole.loss.size() == 30);
  for (bool first_sharded : {true, false}) {
    const std::string name = first_sharded ? "sharded_first" : "plain_first";
    train_series(job.dir, name,
                 sharded_config(job, name, 2, 15, first_sharded, flat));
    auto resumed = train_series(
      job.dir, name, sharded_config(job, name, 2, 30, !first_sharded, flat));
    INFO(name);
    REQUIRE(resumed.loss.size() == 30);
    CHECK(resumed.loss == whole.loss);
  }
}
