// The same 30 steps on world size 1, 2 and 4 (same global batch, EP over all
// ranks, dropless) give the same loss at every step: aux-loss statistics and
// bias updates use counts over the global batch, so the split does not
// matter beyond float rounding.

#include <catch2/catch.hpp>

#include <cmath>

#include "test_support.hpp"

using namespace tutti::testing;

TEST_CASE("losses agree across world sizes 1, 2, 4", "[integration]") {
  auto [dir, data] = scratch_with_data("world_size_invariance");

  std::vector<std::vector<double>> losses;
  for (int world : {1, 2, 4}) {
    auto run_dir = dir / ("w" + std::to_string(world));
    run_job(dir / ("w" + std::to_string(world) + ".yaml"),
            small_config(data.string(), run_dir.string(), world, 30));
    losses.push_back(metric_series(run_dir / "metrics.jsonl", "loss"));
    REQUIRE(losses.back().size() == 30);
  }
  double worst = 0;
  for (size_t w = 1; w < losses.size(); ++w)
    for (size_t s = 0; s < 30; ++s) {
      double rel = std::abs(losses[w][s] - losses[0][s])
                   / std::abs(losses[0][s]);
      worst = std::max(worst, rel);
      INFO("world index " << w << " step " << s + 1 << ": " << losses[w][s]
                          << " vs " << losses[0][s]);
      CHECK(rel <= 1e-4);
    }
  WARN("largest relative loss difference across world sizes: " << worst);
  // The loss must actually move, or agreeing proves nothing.
  CHECK(losses[0].back() < losses[0].front() - 0.05);
}
