// Restart in place has a price in memory: each expert shard keeps a second
// set of weights and moments, and each rank a copy of the step's expert
// inputs to replay. A job whose expert shards may not restart
// (supervision.expert_shard.max_restarts: 0) keeps neither, and trains to
// the same bits: the in-place AdamW equals the out-of-place one, and the
// shard reads the rank's own buffers instead of the copies. (Its failure
// path, recovery from the checkpoint, is test_faults' escalation case.)

#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace tutti::testing;

TEST_CASE("without restart in place: the same losses to the bit",
          "[integration]") {
  auto [dir, data] = scratch_with_data("restart_off", 40000);
  std::vector<std::vector<double>> series;
  for (const std::string name : {"in-place", "off"}) {
    auto run_dir = dir / name;
    auto text = small_config(data.string(), run_dir.string(), 2, 6);
    if (name == "off")
      text += "supervision:\n  expert_shard:\n    max_restarts: 0\n";
    run_job(dir / (name + ".yaml"), text);
    series.push_back(training_series(run_dir / "metrics.jsonl"));
    REQUIRE(series.back().size() == 4 * 6);
  }
  CHECK(series[1] == series[0]);
}
