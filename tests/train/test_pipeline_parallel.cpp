// Pipeline parallelism (cluster_config.pipeline_model_parallel_size): the
// layers in contiguous stages, Megatron's 1F1B schedule over the
// micro-batches, activations and their gradients between neighbouring
// stages.
// - (PP2, 4 micro-batches) gives the losses of world 1 with the same 4
//   micro-batches to the bit over 30 steps: each parameter lives on one
//   stage (which alone holds, trains and updates it) and accumulates its
//   micro-batches' gradients in the same order, and the stages' parts of
//   the step's sums (the gradient norm's pieces among them) are added to
//   zeros only.
//   (PP2·DP2·EP2) gives the world-2 (DP2·EP2) losses to the bit likewise.
// - A PP2 checkpoint holds whole tensors (stage 1 sends its layers to
//   stage 0, which writes them): it resumes on world 1 with the
//   uninterrupted world-1 run's losses to the bit, and on (DP2·EP2) within
//   1e-3 (DP2's own drift from world 1 with 4 micro-batches is 3.7e-4),
//   and `tutti export` reads it.
// - (TP2·PP2, 4 micro-batches, world 4) gives the world-1 losses within
//   1e-4 relative (the TP sums change the order of additions), and the
//   (TP2) losses with the same 4 micro-batches to the bit; its checkpoint
//   resumes on world 1 (within 1e-4 of the uninterrupted world-1 run) and
//   on (DP2·EP2) (within 1e-3, as PP2's).
// - (PP2·DP2) with the distributed optimizer gives the unsharded losses and
//   gradient norms to the bit (a norm piece that crosses a stage's optimizer
//   slices is joined over the dp ranks, adding zeros), and its checkpoint
//   resumes on (DP2·EP2) with that run's losses to the bit.
// - (TP2·PP2·EP2·DP2) with the distributed optimizer and recomputation
//   gives the unsharded bits and the world-1 losses within 2e-3 (flat
//   learning rate); its checkpoint, resumed unsharded, continues the
//   unsharded run to the bit.
// - Stages of unequal layers (cluster_config.pipeline_layers: 5 layers as
//   [1, 2, 2] and [2, 2, 1] over PP3) give the world-1 losses to the bit
//   (and their checkpoints export to the same model, as PP2's, PP2·DP2's
//   and the sharded TP2·PP2·DP2's do to their bit-equal twins');
//   a [1, 2, 2] checkpoint resumes on world 1 to the bit and on (DP2·EP2)
//   within 1e-3, as PP2's.
// - What PP does not combine with yet (data.rack_affinity) is refused
//   with the key's name.

#include <catch2/catch.hpp>

#include "layout_support.hpp"

using namespace tutti::testing;

namespace {

// small_config on `world` ranks in `pp` stages, the experts spread over
// each stage's data-parallel ranks, 4 micro-batches.
std::string pp_config(const scratch_job& job, const std::string& name,
                      int world, int pp, int steps,
                      const std::string& train_extra = "") {
  const auto text = model_parallel_config(
    job, name, world, "pipeline_model_parallel_size", pp, steps);
  return with_train_keys(text, "  micro_batches: 4\n" + train_extra);
}

// (TP2·PP2) on world 4, or with pp 1 (TP2) on world 2, 4 micro-batches.
std::string tp2_config(const scratch_job& job, const std::string& name,
                       int world, int pp, int steps,
                       const std::string& train_extra = "") {
  return with_train_keys(tp_pp_config(job, name, world, 2, pp, steps),
                         "  micro_batches: 4\n" + train_extra);
}

// pp_config with 5 layers; with pp 3, in the stages `stages` lists.
std::string five_layers(const scratch_job& job, const std::string& name,
                        int world, int pp, const std::string& stages, int steps,
                        const std::string& train_extra = "") {
  auto text = replace_once(pp_config(job, name, world, pp, steps, train_extra),
                           "  num_hidden_layers: 2\n",
                           "  num_hidden_layers: 5\n");
  return pp != 3 ? text
                 : replace_once(text, "  pipeline_model_parallel_size: 3\n",
                                "  pipeline_model_parallel_size: 3\n"
                                "  pipeline_layers: "
                                  + stages + "\n");
}

} // namespace

TEST_CASE("pipeline parallelism gives the losses of world 1 to the bit",
          "[integration]") {
  auto job = scratch_with_data("pipeline_parallel");
  auto world1 = train_series(job.dir, "w1", pp_config(job, "w1", 1, 1, 30));
  REQUIRE(world1.loss.size() == 30);
  CHECK(world1.loss.back() < world1.loss.front() - 0.05);
  auto pp2 = train_series(job.dir, "pp2", pp_config(job, "pp2", 2, 2, 30));
  REQUIRE(pp2.loss.size() == 30);
  check_same_bits(world1, pp2, "PP2 against world 1");
  auto dp2 = train_series(job.dir, "dp2", pp_config(job, "dp2", 2, 1, 30));
  auto pp2dp2 = train_series(job.dir, "pp2dp2",
                             pp_config(job, "pp2dp2", 4, 2, 30));
  REQUIRE(pp2dp2.loss.size() == 30);
  for (size_t i = 0; i < 30; ++i) {
    INFO("PP2·DP2 against DP2, step " << i + 1);
    CHECK(pp2dp2.loss[i] == dp2.loss[i]);
  }
  // Their checkpoints (the stages gathered) export to the same model.
  CHECK(exported_model(job.dir / "pp2", 30)
        == exported_model(job.dir / "w1", 30));
  CHECK(exported_model(job.dir / "pp2dp2", 30)
        == exported_model(job.dir / "dp2", 30));
}

TEST_CASE("an uneven 3-stage pipeline of 5 layers gives the losses of "
          "world 1 to the bit",
          "[integration]") {
  auto job = scratch_with_data("pipeline_uneven");
  auto world1 = train_series(job.dir, "w1",
                             five_layers(job, "w1", 1, 1, "", 10));
  REQUIRE(world1.loss.size() == 10);
  for (const char* stages : {"[1, 2, 2]", "[2, 2, 1]"}) {
    auto pp3 = train_series(job.dir, "pp3",
                            five_layers(job, "pp3", 3, 3, stages, 10));
    INFO(stages << ": " << pp3.output);
    REQUIRE(pp3.loss.size() == 10);
    check_same_bits(world1, pp3, "PP3 against world 1");
    CHECK(exported_model(job.dir / "pp3", 10)
          == exported_model(job.dir / "w1", 10));
  }
}

TEST_CASE("an uneven PP3 checkpoint resumes on world 1 and on DP2·EP2",
          "[integration]") {
  auto job = scratch_with_data("pipeline_uneven_resume");
  const std::string flat = "  min_lr: 0.003\n"; // min_lr = lr
  check_resumes_across_layouts(
    job, "pp3",
    [&](const std::string& name, int steps) {
      return five_layers(job, name, 3, 3, "[1, 2, 2]", steps, flat);
    },
    [&](const std::string& name, int world, int steps) {
      return five_layers(job, name, world, 1, "", steps, flat);
    },
    false,
    [](int world, const std::vector<double>& whole,
       const std::vector<double>& resumed, double worst) {
      // As PP2's: world 1 to the bit, (DP2·EP2) within its own drift.
      if (world == 1)
        CHECK(resumed == whole);
      else
        CHECK(worst <= 1e-3);
    });
}

TEST_CASE("a PP2 checkpoint resumes on world 1 and on DP2·EP2",
          "[integration]") {
  auto job = scratch_with_data("pipeline_parallel_resume");
  const std::string flat = "  min_lr: 0.003\n"; // min_lr = lr
  check_resumes_across_layouts(
    job, "pp2",
    [&](const std::string& name, int steps) {
      return pp_config(job, name, 2, 2, steps, flat);
    },
    [&](const std::string& name, int world, int steps) {
      return pp_config(job, name, world, 1, steps, flat);
    },
    true,
    [](int world, const std::vector<double>& whole,
       const std::vector<double>& resumed, double worst) {
      // On world 1 the resumed run is the uninterrupted one to the bit. DP2
      // changes the order of the gradient sums: (DP2·EP2) with 4
      // micro-batches alone drifts from world 1 by up to 3.7e-4 relative
      // over these 30 steps (measured 2026-12-02), so it gets that margin.
      if (world == 1)
        CHECK(resumed == whole);
      else
        CHECK(worst <= 1e-3);
    });
}

TEST_CASE("tensor and pipeline parallelism together (TP2·PP2) give the "
          "losses of world 1",
          "[integration]") {
  auto job = scratch_with_data("tp_pp");
  auto world1 = train_series(job.dir, "w1", pp_config(job, "w1", 1, 1, 30));
  auto tp2 = train_series(job.dir, "tp2", tp2_config(job, "tp2", 2, 1, 30));
  auto both = train_series(job.dir, "tp2pp2",
                           tp2_config(job, "tp2pp2", 4, 2, 30));
  REQUIRE(world1.loss.size() == 30);
  REQUIRE(both.loss.size() == 30);
  const double worst = worst_relative(world1.loss, both.loss);
  WARN("largest relative loss difference, TP2·PP2 against world 1: " << worst);
  CHECK(worst <= 1e-4);
  CHECK(worst_relative(world1.grad_norm, both.grad_norm) <= 1e-3);
  // The stages change no order of additions: TP2's bits.
  check_same_bits(tp2, both, "TP2·PP2 against TP2");
}

TEST_CASE("a TP2·PP2 checkpoint resumes on world 1 and on DP2·EP2",
          "[integration]") {
  auto job = scratch_with_data("tp_pp_resume");
  const std::string flat = "  min_lr: 0.003\n"; // min_lr = lr
  check_resumes_across_layouts(
    job, "tp2pp2",
    [&](const std::string& name, int steps) {
      return tp2_config(job, name, 4, 2, steps, flat);
    },
    [&](const std::string& name, int world, int steps) {
      return pp_config(job, name, world, 1, steps, flat);
    },
    false,
    [](int world, const std::vector<double>&, const std::vector<double>&,
       double worst) {
      // TP's sums alone stay within 1e-4 (test_tensor_parallel); DP2 with 4
      // micro-batches drifts by up to 3.7e-4 on its own (above).
      CHECK(worst <= (world == 1 ? 1e-4 : 1e-3));
    });
}

TEST_CASE("PP2·DP2 with the distributed optimizer gives the unsharded bits "
          "and its checkpoint resumes on DP2·EP2",
          "[integration]") {
  auto job = scratch_with_data("pipeline_parallel_sharded");
  const std::string flat = "  min_lr: 0.003\n"; // as in the PP2 case above
  const std::string sharding = "  optimizer_sharding: true\n";
  auto plain = train_series(job.dir, "plain",
                            pp_config(job, "plain", 4, 2, 30, flat));
  auto sharded = train_series(
    job.dir, "sharded", pp_config(job, "sharded", 4, 2, 30, flat + sharding));
  REQUIRE(plain.loss.size() == 30);
  REQUIRE(sharded.loss.size() == 30);
  check_same_bits(plain, sharded, "PP2·DP2 sharded against unsharded");
  // PP2·DP2 is (DP2·EP2) to the bit (above), so a sharded PP2·DP2
  // checkpoint resumed on (DP2·EP2) continues the uninterrupted (DP2·EP2)
  // run to the bit: the moments gathered whole, each stage's to stage 0.
  auto dp2 = train_series(job.dir, "dp2",
                          pp_config(job, "dp2", 2, 1, 30, flat));
  auto first = train_series(
    job.dir, "then_dp2", pp_config(job, "then_dp2", 4, 2, 15, flat + sharding));
  REQUIRE(first.loss.size() == 15);
  auto resumed = train_series(job.dir, "then_dp2",
                              pp_config(job, "then_dp2", 2, 1, 30, flat));
  REQUIRE(resumed.loss.size() == 30);
  CHECK(resumed.loss == dp2.loss);
}

TEST_CASE("TP2·PP2·EP2·DP2 with the distributed optimizer and recomputation "
          "gives the unsharded bits and the losses of world 1",
          "[integration]") {
  auto job = scratch_with_data("tp_pp_dp_sharded");
  // min_lr = lr: 15 steps and 15 more are the 30-step run (resumed below).
  const std::string recompute = "  min_lr: 0.003\n  recompute: full\n";
  const std::string sharding = "  optimizer_sharding: true\n";
  auto world1 = train_series(
    job.dir, "w1", pp_config(job, "w1", 1, 1, 30, "  min_lr: 0.003\n"));
  auto plain = train_series(job.dir, "plain",
                            tp2_config(job, "plain", 8, 2, 30, recompute));
  auto sharded = train_series(
    job.dir, "sharded",
    tp2_config(job, "sharded", 8, 2, 30, recompute + sharding));
  REQUIRE(plain.loss.size() == 30);
  REQUIRE(sharded.loss.size() == 30);
  check_same_bits(plain, sharded, "TP2·PP2·DP2 sharded against unsharded");
  CHECK(exported_model(job.dir / "sharded", 30)
        == exported_model(job.dir / "plain", 30));
  const double worst = worst_relative(world1.loss, sharded.loss);
  WARN("largest relative loss difference, TP2·PP2·EP2·DP2 sharded against "
       "world 1: "
       << worst);
  // TP's sums and DP2's micro-batches at a flat learning rate (as in the
  // resume cases above); 9.2e-4 measured on Zen 5.
  CHECK(worst <= 2e-3);
  // Its checkpoint holds every TP rank's moments whole: resumed unsharded
  // on the same layout, it continues the unsharded run to the bit.
  auto first = train_series(
    job.dir, "then_plain",
    tp2_config(job, "then_plain", 8, 2, 15, recompute + sharding));
  REQUIRE(first.loss.size() == 15);
  auto resumed = train_series(
    job.dir, "then_plain", tp2_config(job, "then_plain", 8, 2, 30, recompute));
  INFO(resumed.output);
  REQUIRE(resumed.loss.size() == 30);
  CHECK(resumed.output.find("resuming after step 15") != std::string::npos);
  CHECK(resumed.loss == plain.loss);
}

TEST_CASE("pipeline parallelism refuses what it does not combine with",
          "[integration]") {
  auto job = scratch_with_data("pipeline_parallel_refused");
  auto text = pp_config(job, "refused", 2, 2, 2);
  const std::string anchor = "  router_top_k: 2\n";
  const auto at = text.find(anchor);
  REQUIRE(at != std::string::npos);
  text.insert(at + anchor.size(), "  placement: plan.json\n");
  text = replace_once(text, "data:\n", "data:\n  rack_affinity: true\n");
  auto cfg = job.dir / "refused.yaml";
  write_text(cfg, text);
  auto r = run(tutti_bin() + " run " + cfg.string() + " --quiet", 30);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("cluster_config.pipeline_model_parallel_size")
        != std::string::npos);
  CHECK(r.output.find("data.rack_affinity") != std::string::npos);
}
