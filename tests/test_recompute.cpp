// Activation recomputation (train.recompute): backward rebuilds what the
// forward pass did not keep, with the same kernels on the same inputs, so
// every loss is equal to the bit: selective (the attention probabilities)
// and full (each layer from its input, the dispatch repeated), on
// (DP2·EP2) with 2 micro-batches.

#include <catch2/catch.hpp>

#include "layout_support.hpp"

using namespace tutti::testing;

TEST_CASE("recomputation leaves every loss equal to the bit",
          "[integration]") {
  auto job = scratch_with_data("recompute");
  auto config = [&](const std::string& mode) {
    return with_train_keys(small_config(job.data.string(),
                                        (job.dir / mode).string(), 2, 30),
                           "  micro_batches: 2\n  recompute: " + mode + "\n");
  };
  auto none = train_series(job.dir, "none", config("none"));
  REQUIRE(none.loss.size() == 30);
  for (std::string mode : {"selective", "full"}) {
    auto again = train_series(job.dir, mode, config(mode));
    INFO(mode);
    CHECK(again.loss == none.loss);
    CHECK(again.grad_norm == none.grad_norm);
  }
}
