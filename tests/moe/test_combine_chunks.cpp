// The combine in chunks (moe_config.combine_chunks): chunk c's outputs are
// sent while the expert shard computes chunk c+1, and in the backward pass
// chunk c's input gradients while it computes c+1's. It only moves data,
// so every chunking gives the same bits as one combine (losses and the
// gradient norm), and the overlap it buys is reported (time_overlap_s).
// Chunks pipeline a transfer, so they apply where the ranks exchange over
// Gloo (cluster_config.local_transport: tcp here); ranks of one process
// exchanging through memory combine in one chunk whatever the config says,
// and give the same bits as over TCP.

#include <catch2/catch.hpp>

#include <cstdlib>
#include <numeric>

#include "test_support.hpp"

using namespace tutti::testing;

TEST_CASE("chunked combine: same losses to the bit, overlap reported",
          "[integration]") {
  auto [dir, data] = scratch_with_data("combine_chunks", 40000);
  // 8 experts over 2 ranks: 4 local experts, so chunks of 1, 2 and uneven
  // (3 chunks: 1 + 1 + 2 experts) all occur.
  std::vector<std::vector<double>> series;
  std::vector<double> overlap;
  // The last run: 4 chunks configured, through memory.
  for (int chunks : {1, 2, 3, 4, -4}) {
    const bool memory = chunks < 0;
    chunks = std::abs(chunks);
    auto name = "c" + std::to_string(chunks) + (memory ? "-memory" : "");
    auto run_dir = dir / name;
    auto text = replace_line(
      small_config(data.string(), run_dir.string(), 2, 6), "  num_experts: 4",
      "  num_experts: 8\n  combine_chunks: " + std::to_string(chunks));
    text = insert_after(text, "cluster_config:\n",
                        std::string("  local_transport: ")
                          + (memory ? "memory" : "tcp") + "\n");
    run_job(dir / (name + ".yaml"), text);
    auto metrics = run_dir / "metrics.jsonl";
    series.push_back(training_series(metrics));
    REQUIRE(series.back().size() == 4 * 6);
    auto o = metric_series(metrics, "time_overlap_s");
    REQUIRE(o.size() == 6);
    overlap.push_back(std::accumulate(o.begin(), o.end(), 0.0));
  }
  for (size_t i = 1; i < series.size(); ++i) {
    INFO("run " << i
                << " (chunks 2, 3, 4 over TCP; 4 through memory) "
                   "against one combine over TCP");
    CHECK(series[i] == series[0]);
  }
  CHECK(overlap[0] == 0);
  for (size_t i = 1; i < 4; ++i) {
    INFO("chunking " << i + 1);
    CHECK(overlap[i] > 0);
  }
  CHECK(overlap[4] == 0); // through memory: one chunk, nothing overlapped
}
