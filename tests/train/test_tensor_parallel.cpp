// Tensor parallelism (cluster_config.tensor_model_parallel_size): attention
// split by heads, the experts' FFN by their intermediate dimension, partial
// outputs and input gradients summed over the TP group.
// - (TP2) and (TP2·DP2, experts over the two data-parallel ranks) give the
//   losses of world 1 within 1e-4 relative over 30 steps (the TP sums
//   change the order of additions, so not to the bit).
// - A Qwen3-MoE (QK-norm, heads of their own size, gates without
//   renormalisation) under TP2 gives the losses of world 1 likewise, and
//   its TP2 checkpoint resumes on world 1 and on (DP2·EP2).
// - Multi-head latent attention under TP2 likewise (the latents' weights
//   replicated, their partial gradients summed).
// - The embedding and LM head split by vocabulary (vocab-parallel); a
//   vocabulary TP does not divide is refused.
// - A TP2 checkpoint holds whole tensors: it resumes on world 1 and on
//   (DP2·EP2) with the losses of the uninterrupted world-1 run within 1e-4,
//   and `tutti export` reads it.

#include <catch2/catch.hpp>

#include "layout_support.hpp"
#include "tutti/model/param_layout.hpp"
#include "tutti/model/tensor_names.hpp"
#include "tutti/train/tensor_parallel.hpp"

using namespace tutti::testing;

namespace {

// small_config on `world` ranks, `tp` of them splitting each layer, the
// experts spread over the data-parallel ranks.
std::string tp_config(const scratch_job& job, const std::string& name,
                      int world, int tp, int steps,
                      const std::string& train_extra = "") {
  const auto text = model_parallel_config(
    job, name, world, "tensor_model_parallel_size", tp, steps);
  return train_extra.empty() ? text : with_train_keys(text, train_extra);
}

} // namespace

// Megatron's vocab-parallel embedding and LM head: each TP rank holds a
// slice of the vocabulary's rows of both (the TP cases below train with
// them to the world-1 losses), and a vocabulary TP does not divide is
// refused naming the key.
TEST_CASE("tensor parallelism splits the embedding and LM head by "
          "vocabulary",
          "[integration]") {
  tutti::model_config m;
  m.vocab_size = 32;
  m.hidden_size = 16;
  m.intermediate_size = 32;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  tutti::moe_config e;
  e.num_experts = 4;
  const auto local =
    tutti::train::tp_local_layout(tutti::model::dense_layout(m, e), 2);
  for (const char* name :
       {tutti::model::names::embed, tutti::model::names::lm_head}) {
    const auto* t = local.find(name);
    REQUIRE(t != nullptr);
    CHECK(t->shape == std::vector<int64_t>{16, 16});
  }
  auto job = scratch_with_data("tensor_parallel_vocab");
  auto text = replace_once(tp_config(job, "odd", 2, 2, 2),
                           "  vocab_size: 32\n", "  vocab_size: 33\n");
  write_text(job.dir / "odd.yaml", text);
  auto r = run(tutti_bin() + " run " + (job.dir / "odd.yaml").string(), 30);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("cluster_config.tensor_model_parallel_size: 2 must "
                      "divide model.vocab_size (33)")
        != std::string::npos);
}

// as_qwen3: QK-norm's weights get partial gradients on each TP rank,
// summed over the group.
TEST_CASE("Qwen3-MoE under tensor parallelism gives the losses of world 1",
          "[integration]") {
  auto job = scratch_with_data("tensor_parallel_qwen3");
  auto world1 = train_series(job.dir, "w1",
                             as_qwen3(tp_config(job, "w1", 1, 1, 20)));
  REQUIRE(world1.loss.size() == 20);
  CHECK(world1.loss.back() < world1.loss.front() - 0.05);
  auto split = train_series(job.dir, "tp2",
                            as_qwen3(tp_config(job, "tp2", 2, 2, 20)));
  const double worst = worst_relative(world1.loss, split.loss);
  WARN("largest relative loss difference, Qwen3-MoE TP2 against world 1: "
       << worst);
  CHECK(worst <= 1e-4);
  CHECK(worst_relative(world1.grad_norm, split.grad_norm) <= 1e-3);
}

// Multi-head latent attention: the heads split, the latents' projections
// and norms whole on each TP rank with partial gradients summed.
TEST_CASE("multi-head latent attention under tensor parallelism gives the "
          "losses of world 1",
          "[integration]") {
  auto job = scratch_with_data("tensor_parallel_mla");
  auto world1 = train_series(job.dir, "w1",
                             as_mla(tp_config(job, "w1", 1, 1, 20)));
  REQUIRE(world1.loss.size() == 20);
  CHECK(world1.loss.back() < world1.loss.front() - 0.05);
  auto split = train_series(job.dir, "tp2",
                            as_mla(tp_config(job, "tp2", 2, 2, 20)));
  const double worst = worst_relative(world1.loss, split.loss);
  WARN("largest relative loss difference, MLA TP2 against world 1: " << worst);
  CHECK(worst <= 1e-4);
  CHECK(worst_relative(world1.grad_norm, split.grad_norm) <= 1e-3);
}

// Held-out evaluations every 10 steps, in pieces smaller than a
// micro-batch, between the training steps: the vocab-parallel loss sizes
// its buffers per call.
TEST_CASE("tensor parallelism gives the losses of world 1", "[integration]") {
  auto job = scratch_with_data("tensor_parallel");
  auto with_evals = [](const std::string& text) {
    return replace_once(text, "  eval_sequences: 8\n",
                        "  eval_sequences: 2\n  eval_interval: 10\n");
  };
  auto world1 = train_series(job.dir, "w1",
                             with_evals(tp_config(job, "w1", 1, 1, 30)));
  REQUIRE(world1.loss.size() == 30);
  CHECK(world1.loss.back() < world1.loss.front() - 0.05);
  for (auto [world, tp] : {std::pair{2, 2}, std::pair{4, 2}}) {
    const auto name = "tp" + std::to_string(tp) + "_w" + std::to_string(world);
    auto split = train_series(
      job.dir, name, with_evals(tp_config(job, name, world, tp, 30)));
    INFO(name);
    const double worst = worst_relative(world1.loss, split.loss);
    WARN("largest relative loss difference, " << name
                                              << " against world 1: " << worst);
    CHECK(worst <= 1e-4);
    CHECK(worst_relative(world1.grad_norm, split.grad_norm) <= 1e-3);
  }
}

TEST_CASE("a TP2 checkpoint resumes on world 1 and on DP2·EP2",
          "[integration]") {
  auto job = scratch_with_data("tensor_parallel_resume");
  const std::string flat = "  min_lr: 0.003\n"; // min_lr = lr
  check_resumes_across_layouts(
    job, "tp2",
    [&](const std::string& name, int steps) {
      return tp_config(job, name, 2, 2, steps, flat);
    },
    [&](const std::string& name, int world, int steps) {
      return tp_config(job, name, world, 1, steps, flat);
    },
    true,
    [](int, const std::vector<double>&, const std::vector<double>&,
       double worst) { CHECK(worst <= 1e-4); });
}

TEST_CASE("a Qwen3-MoE TP2 checkpoint resumes on world 1 and on DP2·EP2",
          "[integration]") {
  auto job = scratch_with_data("tensor_parallel_qwen3_resume");
  const std::string flat = "  min_lr: 0.003\n"; // min_lr = lr
  check_resumes_across_layouts(
    job, "tp2",
    [&](const std::string& name, int steps) {
      return as_qwen3(tp_config(job, name, 2, 2, steps, flat));
    },
    [&](const std::string& name, int world, int steps) {
      return as_qwen3(tp_config(job, name, world, 1, steps, flat));
    },
    true,
    [](int, const std::vector<double>&, const std::vector<double>&,
       double worst) { CHECK(worst <= 1e-4); });
}
