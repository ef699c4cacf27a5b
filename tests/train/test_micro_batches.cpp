// Gradient accumulation (train.micro_batches): each rank runs its batch as
// micro-batches in order, gradients summed into one buffer. What must agree:
// - the same 30 steps with 4 micro-batches on world 1, and with 2 on
//   (DP2·EP2), give losses within 1e-4 relative of 1 micro-batch on world 1
//   with the load-balancing loss off (dropless: micro-batching then changes
//   only float rounding);
// - with it on, each micro-batch's loss has its own expert fractions (as in
//   Megatron-Core), a real change of the objective: within 1e-3, and
//   reported;
// - a micro-batched job run again gives the same bits (the summation order
//   is fixed, not a matter of scheduling).

#include <catch2/catch.hpp>

#include "layout_support.hpp"

using namespace tutti::testing;

TEST_CASE("micro-batches give the losses of one batch", "[integration]") {
  auto job = scratch_with_data("micro_batches");
  auto config = [&](const std::string& name, int world, int micro,
                    bool aux = false) {
    auto text = small_config(job.data.string(), (job.dir / name).string(),
                             world, 30);
    if (!aux) {
      const std::string key = "  aux_loss_coeff: 0.01\n";
      const auto at = text.find(key);
      REQUIRE(at != std::string::npos);
      text.replace(at, key.size(), "  aux_loss_coeff: 0\n");
    }
    return with_train_keys(text,
                           "  micro_batches: " + std::to_string(micro) + "\n");
  };
  auto whole = train_series(job.dir, "w1_m1", config("w1_m1", 1, 1));
  auto four = train_series(job.dir, "w1_m4", config("w1_m4", 1, 4));
  auto again = train_series(job.dir, "w1_m4_again", config("w1_m4_again", 1, 4));
  auto dp2 = train_series(job.dir, "w2_m2", config("w2_m2", 2, 2));
  REQUIRE(whole.loss.size() == 30);
  const double w4 = worst_relative(whole.loss, four.loss);
  const double w2 = worst_relative(whole.loss, dp2.loss);
  WARN("largest relative loss difference from 1 micro-batch on world 1 "
       "(no load-balancing loss): "
       << w4 << " (4 micro-batches, world 1), " << w2
       << " (2 micro-batches, DP2·EP2)");
  CHECK(w4 <= 1e-4);
  CHECK(w2 <= 1e-4);
  CHECK(four.loss == again.loss);
  auto aux_whole = train_series(job.dir, "aux_m1", config("aux_m1", 1, 1, true));
  auto aux_four = train_series(job.dir, "aux_m4", config("aux_m4", 1, 4, true));
  const double aux = worst_relative(aux_whole.loss, aux_four.loss);
  WARN("with the load-balancing loss, 4 micro-batches against 1: " << aux);
  CHECK(aux <= 1e-3);
  CHECK(four.grad_norm == again.grad_norm);
  // The loss must move, or agreeing proves nothing.
  CHECK(whole.loss.back() < whole.loss.front() - 0.05);
}

TEST_CASE("micro_batches must divide the per-rank batch", "[unit]") {
  auto dir = scratch("micro_batches_bad");
  auto cfg = dir / "bad.yaml";
  write_text(cfg, with_train_keys(small_config("/nonexistent", dir.string(), 2,
                                               3),
                                  "  micro_batches: 3\n"));
  auto r = run(tutti_bin() + " plan " + cfg.string(), 30);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("train.micro_batches") != std::string::npos);
}
