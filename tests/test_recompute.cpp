// Activation recomputation (train.recompute): backward rebuilds what the
// forward pass did not keep, with the same kernels on the same inputs, so
// every loss is equal to the bit: selective (the attention probabilities)
// and full (each layer from its input, the dispatch repeated), on
// (DP2·EP2) with 2 micro-batches, and on (PP2) and (TP2·PP2) with 4 under
// 1F1B (each stage recomputes its own layers; the micro-batches in flight
// keep only what the mode keeps).

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

TEST_CASE("recomputation under pipeline parallelism leaves every loss equal "
          "to the bit",
          "[integration]") {
  auto job = scratch_with_data("recompute_pp");
  auto config = [&](const std::string& mode) {
    return with_train_keys(
      model_parallel_config(job, mode, 2, "pipeline_model_parallel_size", 2,
                            20),
      "  micro_batches: 4\n  recompute: " + mode + "\n");
  };
  auto none = train_series(job.dir, "none", config("none"));
  REQUIRE(none.loss.size() == 20);
  for (std::string mode : {"selective", "full"}) {
    auto again = train_series(job.dir, mode, config(mode));
    INFO(mode);
    CHECK(again.loss == none.loss);
    CHECK(again.grad_norm == none.grad_norm);
  }
  // (TP2·PP2, world 4): each stage's TP ranks rebuild their heads and
  // experts' slices.
  auto tp_pp = [&](const std::string& mode) {
    return with_train_keys(tp_pp_config(job, "tp2pp2_" + mode, 4, 2, 2, 20),
                           "  micro_batches: 4\n  recompute: " + mode + "\n");
  };
  auto tp_none = train_series(job.dir, "tp2pp2_none", tp_pp("none"));
  auto tp_full = train_series(job.dir, "tp2pp2_full", tp_pp("full"));
  REQUIRE(tp_none.loss.size() == 20);
  CHECK(tp_full.loss == tp_none.loss);
  CHECK(tp_full.grad_norm == tp_none.grad_norm);
}
