// The data path under a job: each step's wait for data in metrics.jsonl
// (time_data_s), and the data_wait alert when a throttled reader
// (data.read_mb_s) cannot keep up with the ranks.
#include <catch2/catch.hpp>

#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace tutti::testing;

TEST_CASE("a throttled loader makes the data-wait alert fire",
          "[integration]") {
  auto job = scratch_with_data("data_path");
  // Each rank's 4 windows of 33 two-byte tokens: 264 bytes a step; at
  // 0.002 MB/s a batch takes ~0.13 s to read, far longer than this model's
  // step, and prefetch 1 cannot hide it.
  auto throttled = small_config(job.data.string(), (job.dir / "slow").string(),
                                2, 12);
  throttled.insert(throttled.find("run:\n"),
                   "  read_mb_s: 0.002\n  prefetch: 1\n");
  throttled += "alerts:\n  data_wait: 0.25\n";
  write_text(job.dir / "slow.yaml", throttled);
  auto r = run(tutti_bin() + " run " + (job.dir / "slow.yaml").string(), 300);
  INFO(tail(r.output));
  REQUIRE(r.status == 0);
  CHECK(r.output.find("ALERT important: data_wait") != std::string::npos);

  const auto waits = metric_series(job.dir / "slow" / "metrics.jsonl",
                                   "time_data_s");
  REQUIRE(waits.size() == 12);
  int slow_steps = 0;
  for (double w : waits)
    slow_steps += w > 0.05;
  CHECK(slow_steps >= 6);
}
