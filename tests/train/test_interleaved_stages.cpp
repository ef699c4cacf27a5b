// Interleaved pipeline stages (cluster_config.pipeline_virtual_stages): 4
// layers in 4 chunks over PP2, stage 0 holding layers 0 and 2, stage 1
// layers 1 and 3, run by the interleaved 1F1B schedule with point-to-point
// sends (the last stage's output going back to stage 0).
// - (PP2, v 2, 4 micro-batches) gives the losses and gradient norms of
//   world 1 with the same 4 micro-batches to the bit over 30 steps, and
//   (PP2·DP2, v 2) the (DP2·EP2) run's: each parameter lives on one stage
//   and accumulates its micro-batches' gradients in the same order. Their
//   checkpoints (each tensor taken from the stage holding it) export to
//   the world-1 and (DP2·EP2) models. With train.keep_expert_activations
//   (the shards keep each micro-batch's forward instead of running it
//   again) the same bits, interleaved and plain.
// - (TP2·PP2·DP2, v 2) with the distributed optimizer and full
//   recomputation gives plain 1F1B's (v 1) bits.
// - An interleaved checkpoint resumes on world 1 to the bit and on
//   (DP2·EP2) within 1e-3 (that layout's own drift, as for plain PP2), and
//   a plain PP2 checkpoint resumes interleaved to the bit.
// - Chunks of unequal layers (pipeline_layers, one count a chunk: 6
//   layers as [1, 2, 2, 1]) give the world-1 losses to the bit too.
// - What interleaving needs (chunks that divide the layers or a list of
//   them, micro-batches a multiple of the stages, more than one stage) is
//   refused naming the key.

#include <catch2/catch.hpp>

#include "layout_support.hpp"

using namespace tutti::testing;

namespace {

// small_config with 4 layers on `world` ranks in `pp` stages of `v`
// chunks each (v 1: plain 1F1B), 4 micro-batches.
std::string chunked(const scratch_job& job, const std::string& name, int world,
                    int pp, int v, int steps,
                    const std::string& train_extra = "") {
  auto text = with_train_keys(
    model_parallel_config(job, name, world, "pipeline_model_parallel_size", pp,
                          steps),
    "  micro_batches: 4\n" + train_extra);
  text = replace_once(text, "  num_hidden_layers: 2\n",
                      "  num_hidden_layers: 4\n");
  if (v == 1)
    return text;
  return replace_once(text, "  pipeline_model_parallel_size: 2\n",
                      "  pipeline_model_parallel_size: 2\n"
                      "  pipeline_virtual_stages: "
                        + std::to_string(v) + "\n");
}

} // namespace

TEST_CASE("interleaved stages give the losses of world 1 to the bit",
          "[integration]") {
  auto job = scratch_with_data("interleaved_stages");
  auto world1 = train_series(job.dir, "w1", chunked(job, "w1", 1, 1, 1, 30));
  REQUIRE(world1.loss.size() == 30);
  CHECK(world1.loss.back() < world1.loss.front() - 0.05);
  auto pp2 = train_series(job.dir, "pp2v2", chunked(job, "pp2v2", 2, 2, 2, 30));
  INFO(pp2.output);
  REQUIRE(pp2.loss.size() == 30);
  check_same_bits(world1, pp2, "PP2 v2 against world 1");
  CHECK(exported_model(job.dir / "pp2v2", 30)
        == exported_model(job.dir / "w1", 30));
  auto dp2 = train_series(job.dir, "dp2", chunked(job, "dp2", 2, 1, 1, 30));
  auto pp2dp2 = train_series(job.dir, "pp2dp2v2",
                             chunked(job, "pp2dp2v2", 4, 2, 2, 30));
  REQUIRE(pp2dp2.loss.size() == 30);
  check_same_bits(dp2, pp2dp2, "PP2·DP2 v2 against DP2");
  CHECK(exported_model(job.dir / "pp2dp2v2", 30)
        == exported_model(job.dir / "dp2", 30));
  // The expert shards keeping each micro-batch's forward instead of
  // running it again: the same bits, interleaved or not.
  const std::string keep = "  keep_expert_activations: true\n";
  check_same_bits(world1,
                  train_series(job.dir, "pp2v2_keep",
                               chunked(job, "pp2v2_keep", 2, 2, 2, 30, keep)),
                  "PP2 v2 keeping the experts' activations");
  check_same_bits(dp2,
                  train_series(job.dir, "pp2dp2_keep",
                               chunked(job, "pp2dp2_keep", 4, 2, 1, 30, keep)),
                  "PP2·DP2 keeping the experts' activations");
}

TEST_CASE("interleaved chunks of unequal layers give the losses of world 1 "
          "to the bit",
          "[integration]") {
  auto job = scratch_with_data("interleaved_uneven");
  auto six = [&](const std::string& name, int world, int pp, int v,
                 const std::string& chunks) {
    auto text = replace_once(chunked(job, name, world, pp, v, 10),
                             "  num_hidden_layers: 4\n",
                             "  num_hidden_layers: 6\n");
    return chunks.empty()
             ? text
             : replace_once(text, "  pipeline_virtual_stages: 2\n",
                            "  pipeline_virtual_stages: 2\n"
                            "  pipeline_layers: "
                              + chunks + "\n");
  };
  auto world1 = train_series(job.dir, "w1", six("w1", 1, 1, 1, ""));
  REQUIRE(world1.loss.size() == 10);
  // Stage 0 holds layers 0 and 3-4, stage 1 layers 1-2 and 5.
  auto uneven = train_series(job.dir, "uneven",
                             six("uneven", 2, 2, 2, "[1, 2, 2, 1]"));
  INFO(uneven.output);
  REQUIRE(uneven.loss.size() == 10);
  check_same_bits(world1, uneven, "PP2 v2 chunks [1, 2, 2, 1] against world 1");
  CHECK(exported_model(job.dir / "uneven", 10)
        == exported_model(job.dir / "w1", 10));
}

TEST_CASE("TP2·PP2·DP2 interleaved, sharded and recomputed, gives plain "
          "1F1B's bits",
          "[integration]") {
  auto job = scratch_with_data("interleaved_tp_pp_dp");
  const std::string extra =
    "  optimizer_sharding: true\n  recompute: full\n";
  auto tp2 = [&](const std::string& name, int v) {
    auto text = chunked(job, name, 8, 2, v, 10, extra);
    return replace_once(text, "  pipeline_model_parallel_size: 2\n",
                        "  pipeline_model_parallel_size: 2\n"
                        "  tensor_model_parallel_size: 2\n");
  };
  auto plain = train_series(job.dir, "plain", replace_once(
    tp2("plain", 1), "  ep_size: 4\n", "  ep_size: 2\n"));
  auto interleaved = train_series(job.dir, "interleaved", replace_once(
    tp2("interleaved", 2), "  ep_size: 4\n", "  ep_size: 2\n"));
  INFO(interleaved.output);
  REQUIRE(plain.loss.size() == 10);
  REQUIRE(interleaved.loss.size() == 10);
  check_same_bits(plain, interleaved, "TP2·PP2·DP2 v2 against v1");
}

TEST_CASE("an interleaved checkpoint resumes on world 1 and on DP2·EP2",
          "[integration]") {
  auto job = scratch_with_data("interleaved_resume");
  const std::string flat = "  min_lr: 0.003\n"; // min_lr = lr
  check_resumes_across_layouts(
    job, "pp2v2",
    [&](const std::string& name, int steps) {
      return chunked(job, name, 2, 2, 2, steps, flat);
    },
    [&](const std::string& name, int world, int steps) {
      return chunked(job, name, world, 1, 1, steps, flat);
    },
    false,
    [](int world, const std::vector<double>& whole,
       const std::vector<double>& resumed, double worst) {
      if (world == 1)
        CHECK(resumed == whole);
      else
        CHECK(worst <= 1e-3); // DP2's own drift (test_pipeline_parallel)
    });
  // And the other way: plain PP2's checkpoint, resumed interleaved.
  auto whole = train_series(job.dir, "whole_pp2",
                            chunked(job, "whole_pp2", 2, 2, 2, 30, flat));
  auto resumed = resumed_series(
    job.dir, "pp2_then_v2", chunked(job, "pp2_then_v2", 2, 2, 1, 15, flat),
    chunked(job, "pp2_then_v2", 2, 2, 2, 30, flat));
  CHECK(resumed.loss == whole.loss);
}

TEST_CASE("interleaved stages refuse what they cannot split, naming the key",
          "[integration]") {
  auto job = scratch_with_data("interleaved_refused");
  auto refusal = [&](const std::string& text) {
    auto cfg = job.dir / "refused.yaml";
    write_text(cfg, text);
    auto r = run(tutti_bin() + " run " + cfg.string() + " --quiet", 30);
    CHECK(r.status != 0);
    return r.output;
  };
  const auto good = chunked(job, "refused", 2, 2, 2, 2);
  // 4 layers do not split into 2 stages of 3 chunks.
  CHECK_THAT(refusal(replace_once(good, "  pipeline_virtual_stages: 2\n",
                                  "  pipeline_virtual_stages: 3\n")),
             Catch::Contains("cluster_config.pipeline_virtual_stages: 3 "
                             "chunks on each of 2 stages must divide "
                             "model.num_hidden_layers (4)"));
  CHECK_THAT(refusal(replace_once(good, "  micro_batches: 4\n",
                                  "  micro_batches: 1\n")),
             Catch::Contains("train.micro_batches: 1 must be a multiple of "
                             "pipeline_model_parallel_size (2)"));
  CHECK_THAT(refusal(replace_once(good, "  pipeline_virtual_stages: 2\n",
                                  "  pipeline_virtual_stages: 2\n"
                                  "  pipeline_layers: [1, 3]\n")),
             Catch::Contains("cluster_config.pipeline_layers: lists 2 chunks "
                             "but pipeline_model_parallel_size x "
                             "pipeline_virtual_stages is 4"));
  CHECK_THAT(refusal(replace_once(good, "  pipeline_virtual_stages: 2\n",
                                  "  pipeline_virtual_stages: 2\n"
                                  "  pipeline_first_stage_layers: 1\n")),
             Catch::Contains("cluster_config.pipeline_virtual_stages: 2 takes "
                             "its chunks' layers from pipeline_layers"));
}
