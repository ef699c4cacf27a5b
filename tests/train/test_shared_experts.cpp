// DeepSeek-V3's feed-forward side as options (moe_config.n_shared_experts,
// first_k_dense_replace, model.dense_intermediate_size) on a small model:
// a leading dense layer and two MoE layers with a shared expert.
// - (TP2), (DP2·EP2) and (PP2, the dense layer on the first stage) give
//   the losses of world 1 within 1e-4 relative over 20 steps (TP's sums
//   and the data-parallel gradient sums change the order of additions).
// - Selective and full recomputation leave every loss and gradient norm
//   equal to the bit, on (DP2·EP2) with 2 micro-batches.
// - A TP2 checkpoint holds the new tensors whole: it resumes on world 1 and
//   on (DP2·EP2) within 1e-4, and `tutti export` writes them.

#include <catch2/catch.hpp>

#include <tuple>

#include "layout_support.hpp"

using namespace tutti::testing;

namespace {

std::string shared_config(const scratch_job& job, const std::string& name,
                          int world, const std::string& parallel_key, int size,
                          int steps, const std::string& train_extra = "") {
  auto text = with_shared_experts(
    model_parallel_config(job, name, world, parallel_key, size, steps));
  return train_extra.empty() ? text : with_train_keys(text, train_extra);
}

const std::string tp = "tensor_model_parallel_size";

} // namespace

TEST_CASE("shared experts and a dense layer give the losses of world 1 "
          "under TP2, EP2 and PP2",
          "[integration]") {
  auto job = scratch_with_data("shared_experts");
  // The router losses are per micro-batch, so each layout is compared with
  // world 1 over the same micro-batches: one for TP2 and (DP2·EP2), two
  // for PP2 (1F1B).
  const std::string micro = "  micro_batches: 2\n";
  const auto world1 = train_series(job.dir, "w1",
                                   shared_config(job, "w1", 1, tp, 1, 20));
  const auto world1_micro = train_series(
    job.dir, "w1m2", shared_config(job, "w1m2", 1, tp, 1, 20, micro));
  REQUIRE(world1.loss.size() == 20);
  CHECK(world1.loss.back() < world1.loss.front() - 0.05);
  const std::tuple<const char*, std::string, const job_series*> layouts[] = {
    {"tp2", shared_config(job, "tp2", 2, tp, 2, 20), &world1},
    {"ep2", shared_config(job, "ep2", 2, tp, 1, 20), &world1},
    {"pp2",
     replace_once(shared_config(job, "pp2", 2, "pipeline_model_parallel_size",
                                2, 20, micro),
                  "  pipeline_model_parallel_size: 2\n",
                  "  pipeline_model_parallel_size: 2\n"
                  "  pipeline_layers: [1, 2]\n"),
     &world1_micro}};
  for (const auto& [name, text, reference] : layouts) {
    auto other = train_series(job.dir, name, text);
    INFO(name << ": " << other.output);
    REQUIRE(other.loss.size() == 20);
    const double worst = worst_relative(reference->loss, other.loss);
    WARN("largest relative loss difference, " << name
                                              << " against world 1: " << worst);
    CHECK(worst <= 1e-4);
    CHECK(worst_relative(reference->grad_norm, other.grad_norm) <= 1e-3);
  }
}

TEST_CASE("shared experts and a dense layer recompute to the bit",
          "[integration]") {
  auto job = scratch_with_data("shared_experts_recompute");
  auto config = [&](const std::string& name, const std::string& mode) {
    return shared_config(job, name, 2, tp, 1, 20,
                         "  micro_batches: 2\n  recompute: " + mode + "\n");
  };
  const auto none = train_series(job.dir, "none", config("none", "none"));
  REQUIRE(none.loss.size() == 20);
  for (const char* mode : {"selective", "full"})
    check_same_bits(none, train_series(job.dir, mode, config(mode, mode)),
                    mode);
}

TEST_CASE("a TP2 checkpoint with shared experts resumes on world 1 and on "
          "DP2·EP2",
          "[integration]") {
  auto job = scratch_with_data("shared_experts_resume");
  const std::string flat = "  min_lr: 0.003\n"; // min_lr = lr
  check_resumes_across_layouts(
    job, "tp2",
    [&](const std::string& name, int steps) {
      return shared_config(job, name, 2, tp, 2, steps, flat);
    },
    [&](const std::string& name, int world, int steps) {
      return shared_config(job, name, world, tp, 1, steps, flat);
    },
    true,
    [](int, const std::vector<double>&, const std::vector<double>&,
       double worst) { CHECK(worst <= 1e-4); });
}
