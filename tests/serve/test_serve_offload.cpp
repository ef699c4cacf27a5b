// Offload of rarely used experts (serve.offload): experts whose share of
// their layer's routed tokens in a statistics file is below the threshold
// are served by the designated rank, which holds only them; the tokens are
// those of the contiguous placement to the bit, and /metrics tells what it
// cost (the share of rows that chose an offloaded expert, the steps' wait
// on them).

#include <catch2/catch.hpp>

#include "serve_requests.hpp"
#include "tutti/placement/routing_stats.hpp"
#include "tutti/serve/offload_layout.hpp"
#include "tutti/config/serve_config.hpp"
#include "tutti/serve/serve_layout.hpp"
#include "tutti/serve/served_routing_stats.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

void write_stats(const std::filesystem::path& file, int64_t layers,
                 int64_t experts, const std::vector<int64_t>& load) {
  auto st = placement::routing_stats::zeros(layers, experts, 2);
  st.load = load;
  write_text(file, st.to_json());
}

serve::serve_config offload_config(const std::filesystem::path& stats,
                                   double threshold, int64_t rank,
                                   int64_t ranks) {
  serve::serve_config c;
  c.offload.stats = stats.string();
  c.offload.threshold = threshold;
  c.offload.rank = rank;
  c.limits.ep_ranks = ranks;
  return c;
}

} // namespace

TEST_CASE("offload: the rare experts, and only they, on the offload rank",
          "[unit]") {
  const auto base = serve::expert_layout::contiguous(2, 8, 2).value();
  // Layer 0: experts 1, 3 and 6 under 2% of 503 tokens; layer 1 counted
  // nothing: none of it is rare, so none of it on the offload rank.
  std::vector<int64_t> load = {100, 1, 100, 1, 100, 100, 1, 100,
                               0,   0, 0,   0, 0,   0,   0, 0};
  auto x = serve::with_offload(base, load, 0.02, 1);
  REQUIRE(x.ok());
  const auto& o = x.value();
  REQUIRE(o.check().ok());
  CHECK(o.offload_rank == 1);
  for (int32_t e = 0; e < 8; ++e) {
    const bool rare = e == 1 || e == 3 || e == 6;
    CHECK(o.is_offloaded(0, e) == rare);
    CHECK(o.rank_of(0, e) == (rare ? 1 : 0));
    CHECK_FALSE(o.is_offloaded(1, e));
    CHECK(o.rank_of(1, e) == 0);
  }
  // Three ranks: the offload rank's experts in use spread over the others.
  const auto three = serve::expert_layout::from_owners(
                       1, 6, 3, {0, 0, 1, 1, 2, 2})
                       .value();
  auto spread = serve::with_offload(three, {50, 50, 50, 50, 50, 1}, 0.05, 2);
  REQUIRE(spread.ok());
  CHECK(spread.value().rank_of(0, 5) == 2);
  CHECK(spread.value().rank_of(0, 4) != 2);
  CHECK(spread.value().end(0, 2) - spread.value().begin(0, 2) == 1);

  CHECK_FALSE(serve::with_offload(base, load, 0.02, 2).ok());
  CHECK_FALSE(serve::with_offload(base, {1, 2}, 0.02, 1).ok());
  CHECK_FALSE(serve::with_offload(base, load, 1.5, 1).ok());
}

TEST_CASE("offload while serving: same tokens, and its cost on /metrics",
          "[unit]") {
  const auto dir = scratch("serve_offload");
  const auto js = served_jobs(10);
  // The traffic of a first, contiguous run is the statistics, read from its
  // /metrics.
  std::vector<served_outcome> contiguous;
  std::vector<int64_t> load;
  {
    auto svc = start_service(ep_limits(2));
    auto& s = *svc;
    contiguous = serve_all_jobs(s, js);
    s.stop();
    load = s.ranks()->expert_activations();
    // What `tutti experts stats HOST:PORT --json` writes: the counts of
    // its /metrics.
    auto served = serve::routing_stats_from_metrics(s.metrics().render("m"));
    REQUIRE(served.ok());
    CHECK(served.value().layers == 2);
    CHECK(served.value().experts == 8);
    CHECK(served.value().load == load);
    write_text(dir / "stats.json", served.value().to_json());
  }
  // Under an even share (1/8) of a layer's tokens: rare for this test.
  const auto shape = eight_expert_model().shape;
  auto layout = serve::layout_for(
    offload_config(dir / "stats.json", 0.11, 2, 3), shape);
  INFO(layout.message());
  REQUIRE(layout.ok());
  const auto& x = *layout.value();
  int64_t offloaded = 0;
  for (char o : x.offloaded)
    offloaded += o ? 1 : 0;
  REQUIRE(offloaded > 0);
  REQUIRE(offloaded < 16);

  auto l = ep_limits(3); // 8 experts over 3 ranks: only with a layout
  l.layout = layout.value();
  auto svc = start_service(l);
  auto& s = *svc;
  check_same_outcomes(serve_all_jobs(s, js), contiguous, js);
  s.stop();
  const auto g = s.metrics().gauges();
  CHECK(g.offloaded_experts == offloaded);
  CHECK(g.offloaded_rows > 0);
  CHECK(g.routed_rows > g.offloaded_rows);
  const auto text = s.metrics().render("m");
  CHECK(text.find("tutti_serve_offloaded_token_share{model=\"m\"} 0.")
        != std::string::npos);
  CHECK(text.find("tutti_serve_offload_wait_seconds_count 0\n")
        == std::string::npos);
  CHECK(text.find("tutti_serve_offload_wait_seconds_count ")
        != std::string::npos);
}

TEST_CASE("serve.offload: bad keys, ranks and statistics are refused by name",
          "[unit]") {
  const auto dir = scratch("serve_offload_config");
  const auto shape = eight_expert_model().shape;
  write_stats(dir / "stats.json", 2, 8, std::vector<int64_t>(16, 5));
  write_stats(dir / "wide.json", 3, 8, std::vector<int64_t>(24, 5));
  auto message = [&](const serve::serve_config& c) {
    auto x = serve::layout_for(c, shape);
    REQUIRE_FALSE(x.ok());
    CHECK(x.message().find('\n') == std::string::npos);
    return x.message();
  };
  CHECK(message(offload_config(dir / "stats.json", 0.1, 2, 2))
          .rfind("serve.offload.rank: ", 0)
        == 0);
  CHECK(message(offload_config(dir / "none.json", 0.1, 1, 2))
          .rfind("serve.offload.stats: ", 0)
        == 0);
  CHECK(message(offload_config(dir / "wide.json", 0.1, 1, 2))
          .find("3 layers")
        != std::string::npos);
  CHECK(message(offload_config(dir / "stats.json", 0.1, 0, 1))
          .rfind("serve.offload", 0)
        == 0);

  CHECK_FALSE(serve::routing_stats_from_metrics("up 1\n").ok());
  CHECK_FALSE(serve::routing_stats_from_metrics(
                "tutti_serve_expert_tokens_total{layer=\"x\",expert=\"1\"} 3\n")
                .ok());

  auto parsed = [](const std::string& offload) {
    return serve_refusal("  offload:\n" + offload);
  };
  CHECK(parsed("    stats: s.json\n    threshold: 0.02\n    rank: 1\n")
          .empty());
  CHECK(parsed("    stats: s.json\n    rank: 1\n").find(
          "serve.offload.threshold")
        != std::string::npos);
  CHECK(parsed("    stats: s.json\n    threshold: 2\n    rank: 1\n")
          .find("serve.offload.threshold")
        != std::string::npos);
  CHECK(parsed("    stats: s.json\n    threshold: 0.1\n    rank: 1\n    "
               "node: 2\n")
          .find("serve.offload.node: unknown key")
        != std::string::npos);
}
