// Checkpoint lifecycle: milestones kept beside keep_last, expiry by age,
// every committed checkpoint copied to the archive tier and verified there,
// a resume that finds an archived checkpoint after the local ones are
// deleted, and a save refused before writing when the disk has no room for
// it (with the alert).

#include <catch2/catch.hpp>

#include "daemon_support.hpp"
#include "tutti/lifecycle/checkpoint_tiers.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/job_store.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

TEST_CASE("retention: keep_last, milestones, expiry", "[ops][tiers]") {
  using tutti::lifecycle::steps_to_remove;
  const int64_t now = 100LL * 3600 * 1000;
  std::vector<std::pair<int64_t, int64_t>> held;
  for (int64_t s = 1; s <= 10; ++s)
    held.emplace_back(s, now);
  tutti::lifecycle::retention_policy p{2, 4, 0};
  CHECK(steps_to_remove(held, p, 2, now)
        == std::vector<int64_t>{1, 2, 3, 5, 6, 7});
  // Expiry by age: step 9 is two hours old (keep_last would keep it, age
  // does not); the newest and the milestone 8 stay however old.
  held[8].second = now - 2 * 3600 * 1000;
  held[9].second = now - 5 * 3600 * 1000;
  held[7].second = now - 5 * 3600 * 1000;
  p.expire_after_h = 1;
  CHECK(steps_to_remove(held, p, 3, now)
        == std::vector<int64_t>{1, 2, 3, 5, 9});
  // No count limit (the archive): only age.
  CHECK(steps_to_remove(held, p, -1, now) == std::vector<int64_t>{9});
}

TEST_CASE("milestones and verified archive copies; resume from the archive",
          "[ops][tiers]") {
  auto job = scratch_with_data("ops_tiers");
  const auto run_dir = job.dir / "run", archive = job.dir / "archive";
  const auto base = small_config(job.data.string(), run_dir.string(), 2, 8)
                    + "checkpoint:\n  interval_steps: 1\n  keep_last: 2\n"
                      "  milestone_every: 4\n  archive_dir: "
                    + archive.string() + "\n";
  const auto config8 = job.dir / "c8.yaml", config12 = job.dir / "c12.yaml";
  write_text(config8, base);
  write_text(config12, replace_once(base, "  steps: 8\n", "  steps: 12\n"));

  auto first = run(tutti_bin() + " run " + config8.string() + " --quiet", 300);
  INFO(first.output);
  REQUIRE(first.status == 0);
  // Every checkpoint is in the archive, each verified there.
  CHECK(tutti::lifecycle::archived_steps(archive)
        == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8});
  for (int64_t s = 1; s <= 8; ++s) {
    INFO("archived step " << s);
    CHECK(tutti::store::verify_checkpoint(
            archive / tutti::store::checkpoint_dir_name(s))
            .ok());
  }
  {
    auto db = tutti::store::job_store::open(run_dir / "state");
    REQUIRE(db.ok());
    auto held = db.value()->checkpoints();
    REQUIRE(held.ok());
    std::vector<int64_t> steps;
    for (const auto& c : held.value())
      steps.push_back(c.step);
    INFO("local steps: " << steps.size());
    // The milestone 4 outlives keep_last 2; 1..3 do not.
    CHECK(std::count(steps.begin(), steps.end(), 4) == 1);
    CHECK(std::count(steps.begin(), steps.end(), 8) == 1);
    CHECK(std::count(steps.begin(), steps.end(), 2) == 0);
    CHECK(fs::exists(run_dir / "checkpoints"
                     / tutti::store::checkpoint_dir_name(4)));
    auto events = db.value()->events();
    REQUIRE(events.ok());
    int archived = 0;
    for (const auto& e : events.value())
      archived += e.kind == "checkpoint_archived";
    CHECK(archived == 8);
  }
  CHECK(run(tutti_bin() + " ckpt verify "
              + (archive / tutti::store::checkpoint_dir_name(8)).string(),
            60)
          .status
        == 0);

  // The local tier is lost: the job goes on from the archive's newest.
  fs::remove_all(run_dir / "checkpoints");
  auto second = run(tutti_bin() + " run " + config12.string() + " --quiet",
                    300);
  INFO(second.output);
  REQUIRE(second.status == 0);
  CHECK(has(second.output, "checkpoint of step 8 restored from"));
  CHECK(has(second.output, "resuming after step 8"));
  CHECK(metric_series(run_dir / "metrics.jsonl", "step").size() == 12);
  CHECK(tutti::lifecycle::archived_steps(archive).back() == 12);
}

TEST_CASE("a save that would not fit is refused before writing, with an "
          "alert",
          "[ops][tiers]") {
  auto job = scratch_with_data("ops_tiers_space");
  const auto run_dir = job.dir / "run";
  const auto config = job.dir / "c.yaml";
  // More free space asked for than any disk has.
  write_text(config, small_config(job.data.string(), run_dir.string(), 2, 4)
                       + "checkpoint:\n  interval_steps: 2\n"
                         "  min_free_gb: 1000000000\n");
  auto r = run(tutti_bin() + " run " + config.string() + " --quiet", 300);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(has(r.output, "checkpoint.min_free_gb keeps"));
  CHECK(has(r.output, "checkpoint_disk"));
  CHECK(metric_series(run_dir / "metrics.jsonl", "step").size() == 4);
  // Nothing half-written: no shard file anywhere.
  size_t shards = 0;
  std::error_code ec;
  for (const auto& e :
       fs::recursive_directory_iterator(run_dir / "checkpoints", ec))
    shards += e.path().extension() == ".ckpt";
  CHECK(shards == 0);
}
