// Activation recomputation (train.recompute): backward rebuilds what the
// forward pass did not keep, with the same kernels on the same inputs, so
// every loss is equal to the bit: selective (the attention probabilities)
// and full (each layer from its input, the dispatch repeated), on
// (DP2·EP2) with 2 micro-batches, and on (PP2) and (TP2·PP2) with 4 under
// 1F1B (each stage recomputes its own layers; the micro-batches in flight
// keep only what the mode keeps); for a Qwen3-MoE (QK-norm's inputs
// rebuilt too), and for DeepSeek-V3's sigmoid router (the gates rebuilt
// from the kept logits).

#include <catch2/catch.hpp>

#include "layout_support.hpp"

using namespace tutti::testing;

namespace {

// Trains `config(name, mode)` as job.dir/NAME (NAME = prefix + mode) with
// recompute: none and then with each of `modes`: every loss and gradient
// norm equal to the bit, over `steps` steps.
template <class Config>
void check_same_bits_as_none(const scratch_job& job, const std::string& prefix,
                             Config config,
                             const std::vector<std::string>& modes,
                             size_t steps) {
  auto none = train_series(job.dir, prefix + "none",
                           config(prefix + "none", "none"));
  REQUIRE(none.loss.size() == steps);
  for (const auto& mode : modes) {
    auto again = train_series(job.dir, prefix + mode,
                              config(prefix + mode, mode));
    INFO(prefix + mode);
    CHECK(again.loss == none.loss);
    CHECK(again.grad_norm == none.grad_norm);
  }
}

} // namespace

TEST_CASE("recomputation leaves every loss equal to the bit", "[integration]") {
  auto job = scratch_with_data("recompute");
  auto config = [&](const std::string& name, const std::string& mode) {
    return with_train_keys(
      small_config(job.data.string(), (job.dir / name).string(), 2, 30),
      "  micro_batches: 2\n  recompute: " + mode + "\n");
  };
  check_same_bits_as_none(job, "", config, {"selective", "full"}, 30);
}

TEST_CASE("recomputation of a Qwen3-MoE leaves every loss equal to the bit",
          "[integration]") {
  auto job = scratch_with_data("recompute_qwen3");
  auto config = [&](const std::string& name, const std::string& mode) {
    return with_train_keys(
      as_qwen3(
        small_config(job.data.string(), (job.dir / name).string(), 2, 20)),
      "  micro_batches: 2\n  recompute: " + mode + "\n");
  };
  check_same_bits_as_none(job, "", config, {"selective", "full"}, 20);
}

TEST_CASE("recomputation of multi-head latent attention leaves every loss "
          "equal to the bit",
          "[integration]") {
  auto job = scratch_with_data("recompute_mla");
  auto config = [&](const std::string& name, const std::string& mode) {
    return with_train_keys(
      as_mla(small_config(job.data.string(), (job.dir / name).string(), 2, 20)),
      "  micro_batches: 2\n  recompute: " + mode + "\n");
  };
  check_same_bits_as_none(job, "", config, {"selective", "full"}, 20);
}

TEST_CASE("DeepSeek-V3's sigmoid router trains under EP2, recomputed to the "
          "bit",
          "[integration]") {
  auto job = scratch_with_data("recompute_sigmoid");
  auto config = [&](const std::string& name, const std::string& mode) {
    auto text = small_config(job.data.string(), (job.dir / name).string(), 2,
                             20);
    text = replace_once(text, "  aux_loss_coeff: 0.01\n",
                        "  aux_loss_coeff: 0\n  scoring_func: sigmoid\n"
                        "  n_group: 2\n  topk_group: 1\n"
                        "  routed_scaling_factor: 2.5\n");
    return with_train_keys(text,
                           "  micro_batches: 2\n  recompute: " + mode + "\n");
  };
  const auto none = train_series(job.dir, "none", config("none", "none"));
  const auto full = train_series(job.dir, "full", config("full", "full"));
  REQUIRE(none.loss.size() == 20);
  CHECK(full.loss == none.loss);
  CHECK(full.grad_norm == none.grad_norm);
  CHECK(none.loss.back() < none.loss.front()); // and it learns
}

TEST_CASE("recomputation under pipeline parallelism leaves every loss equal "
          "to the bit",
          "[integration]") {
  auto job = scratch_with_data("recompute_pp");
  auto config = [&](const std::string& name, const std::string& mode) {
    return with_train_keys(model_parallel_config(job, name, 2,
                                                 "pipeline_model_parallel_size",
                                                 2, 20),
                           "  micro_batches: 4\n  recompute: " + mode + "\n");
  };
  check_same_bits_as_none(job, "", config, {"selective", "full"}, 20);
  // (TP2·PP2, world 4): each stage's TP ranks rebuild their heads and
  // experts' slices.
  auto tp_pp = [&](const std::string& name, const std::string& mode) {
    return with_train_keys(tp_pp_config(job, name, 4, 2, 2, 20),
                           "  micro_batches: 4\n  recompute: " + mode + "\n");
  };
  check_same_bits_as_none(job, "tp2pp2_", tp_pp, {"full"}, 20);
}

// Sequences longer than kernels::kAttentionTiledAbove run the tiled
// attention on the CPU too (rank_model keeps each row's log-sum-exp, not
// the [seq, seq] probabilities): the model trains, and selective
// recomputation rebuilds what it keeps to the bit.
TEST_CASE("tiled attention trains and recomputes to the bit", "[integration]") {
  auto job = scratch_with_data("recompute_tiled", 200000);
  auto config = [&](const std::string& name, const std::string& mode) {
    auto text = small_config(job.data.string(), (job.dir / name).string(), 1,
                             12, 0, 4);
    text = replace_once(text, "  max_seq_len: 32\n", "  max_seq_len: 544\n");
    text = replace_once(text, "  seq_len: 32\n", "  seq_len: 544\n");
    return with_train_keys(text, "  recompute: " + mode + "\n");
  };
  auto none = train_series(job.dir, "none", config("none", "none"));
  REQUIRE(none.loss.size() == 12);
  CHECK(none.loss.back() < none.loss.front() - 0.05);
  auto selective = train_series(job.dir, "selective",
                                config("selective", "selective"));
  CHECK(selective.loss == none.loss);
  CHECK(selective.grad_norm == none.grad_norm);
}
