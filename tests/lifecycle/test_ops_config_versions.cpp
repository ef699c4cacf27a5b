// Config versions and rollback: a restart with a changed config is a new
// version (history, diff); a rollback to an earlier version and checkpoint
// continues with exactly the losses that version gives from that
// checkpoint; a config whose model shape differs is refused, the key named.

#include <catch2/catch.hpp>

#include "daemon_support.hpp"
#include "tutti/lifecycle/checkpoint_shape.hpp"
#include "tutti/store/checkpoint_files.hpp"

using namespace tutti::testing;

TEST_CASE("config versions, rollback, and a changed model shape refused",
          "[ops][config_versions]") {
  auto job = scratch_with_data("ops_config_versions");
  const auto run_dir = job.dir / "run";
  auto v1 = small_config(job.data.string(), run_dir.string(), 2, 8)
            + "checkpoint:\n  interval_steps: 2\n  keep_last: 10\n";
  const auto config1 = job.dir / "v1.yaml", config2 = job.dir / "v2.yaml",
             config3 = job.dir / "v3.yaml";
  write_text(config1, v1);
  // Version 2: a lower learning rate, and four steps more.
  write_text(config2,
             replace_once(replace_once(v1, "  lr: 0.003", "  lr: 0.001"),
                          "  steps: 8\n", "  steps: 12\n"));
  // A different model: refused.
  write_text(config3,
             replace_once(v1, "  hidden_size: 32", "  hidden_size: 64"));
  const auto metrics = run_dir / "metrics.jsonl";

  auto first = run(tutti_bin() + " run " + config1.string() + " --quiet", 300);
  INFO(first.output);
  REQUIRE(first.status == 0);
  const auto losses_v1 = metric_series(metrics, "loss");
  REQUIRE(losses_v1.size() == 8);

  auto second = run(tutti_bin() + " run " + config2.string() + " --quiet", 300);
  INFO(second.output);
  REQUIRE(second.status == 0);
  CHECK(has(second.output, "resuming after step 8"));
  const auto losses_v2 = metric_series(metrics, "loss");
  REQUIRE(losses_v2.size() == 12);

  auto history = run(tutti_bin() + " config history " + run_dir.string(), 30);
  INFO(history.output);
  CHECK(history.status == 0);
  CHECK(has(history.output, "start"));
  CHECK(has(history.output, "change"));
  CHECK(has(history.output, "train.lr: 0.003 -> 0.001"));
  auto diff = run(tutti_bin() + " config diff " + run_dir.string() + " 1 2",
                  30);
  INFO(diff.output);
  CHECK(diff.status == 0);
  CHECK(has(diff.output, "train.lr: 0.003 -> 0.001"));
  CHECK(has(diff.output, "train.steps: 8 -> 12"));
  CHECK_FALSE(has(diff.output, "model."));
  CHECK(
    run(tutti_bin() + " config diff " + run_dir.string() + " 1 9", 30).status
    == 2);

  // After a rollback to version 1 at step 4: steps 1..4 as before, 5..8
  // recomputed on version 1's config from the checkpoint of step 4, bit for
  // bit the losses of version 1; the history says so.
  const auto check_rolled_back = [&] {
    const auto after = metric_series(metrics, "loss");
    REQUIRE(after.size() == 8);
    for (size_t i = 0; i < 8; ++i) {
      INFO("step " << i + 1);
      CHECK(after[i] == losses_v1[i]);
    }
    auto later = run(tutti_bin() + " config history " + run_dir.string(), 30);
    INFO(later.output);
    CHECK(has(later.output, "rollback to version 1 from step 4"));
  };

  SECTION("a changed model shape is refused, the key named") {
    auto refused = run(tutti_bin() + " run " + config3.string() + " --quiet",
                       60);
    INFO(refused.output);
    CHECK(refused.status == 2);
    CHECK(has(refused.output, "model.hidden_size: 32 in version 2, 64"));
    // And against a checkpoint: its shard records the shape.
    auto cfg = tutti::load_job_config(config3.string());
    REQUIRE(cfg);
    auto checked = tutti::lifecycle::check_checkpoint_shape(
      run_dir / "checkpoints" / tutti::store::checkpoint_dir_name(4), *cfg);
    CHECK_FALSE(checked.ok());
    CHECK(has(checked.message(), "model.hidden_size"));
    // Another model family: named before any size.
    auto other = *cfg;
    other.model.family = tutti::model_family::qwen3_moe;
    auto family = tutti::lifecycle::check_checkpoint_shape(
      run_dir / "checkpoints" / tutti::store::checkpoint_dir_name(4), other);
    CHECK(has(family.message(), "model.family: the checkpoint in"));
    CHECK(has(family.message(), "has mixtral, the config qwen3_moe"));
  }

  SECTION("a rollback to version 1 at step 4 gives version 1's losses") {
    auto back = run(tutti_bin() + " rollback " + run_dir.string()
                      + " --to-version 1 --checkpoint 4 --quiet",
                    300);
    INFO(back.output);
    REQUIRE(back.status == 0);
    CHECK(has(back.output, "resuming after step 4"));
    check_rolled_back();
    CHECK(std::filesystem::exists(run_dir / "checkpoints" / "rolled_back"
                                  / tutti::store::checkpoint_dir_name(12)));
    // Refusals: a version or a checkpoint that does not exist.
    CHECK(
      run(tutti_bin() + " rollback " + run_dir.string() + " --to-version 7", 30)
        .status
      == 2);
    CHECK(run(tutti_bin() + " rollback " + run_dir.string()
                + " --to-version 1 --checkpoint 5",
              30)
            .status
          == 2);
  }

  SECTION("the shell's rollback does what tutti rollback does") {
    const auto shell = [&](const std::string& commands) {
      return run(tutti_bin() + " shell -c '" + commands + "'", 300);
    };
    auto back = shell("rollback " + run_dir.string()
                      + " --to-version 1 --checkpoint 4 --quiet");
    INFO(back.output);
    REQUIRE(back.status == 0);
    CHECK(has(back.output, "rolled back to config version 1"));
    CHECK(has(back.output, "resuming after step 4"));
    check_rolled_back();
    // Refusals, as tutti rollback's: a version that does not exist (2), and
    // the shell's own: no --to-version, no RUN_DIR without a job (2).
    auto missing = shell("rollback " + run_dir.string() + " --to-version 7");
    CHECK(missing.status == 2);
    CHECK(has(missing.output, "--to-version 7"));
    auto no_version = shell("rollback " + run_dir.string());
    CHECK(no_version.status == 2);
    CHECK(has(no_version.output, "missing --to-version"));
    auto no_dir = shell("rollback --to-version 1");
    CHECK(no_dir.status == 2);
    CHECK(has(no_dir.output, "RUN_DIR"));
  }
}
