// Live replanning by rack (serve.racks, serve.replan): the planner moves
// each expert towards the rack its rows come from, every rank keeping its
// number of experts; a replica of 4 ranks in 2 racks whose experts move
// between steps while it serves gives the tokens and log-probabilities of
// a replica that never moves them, every request complete.

#include <catch2/catch.hpp>

#include "serve_requests.hpp"
#include "tutti/serve/live_replan.hpp"
#include "tutti/serve/rack_replan.hpp"
#include "tutti/config/serve_config.hpp"
#include "tutti/serve/serve_layout.hpp"

using namespace tutti;
using namespace tutti::testing;

TEST_CASE("replan by origin: experts go to the rack their rows come from",
          "[unit]") {
  const auto x = serve::expert_layout::contiguous(1, 8, 4).value();
  const std::vector<int32_t> rack = {0, 0, 1, 1};
  // Ranks 0 and 1 (rack 0) choose experts 4..7, ranks 2 and 3 choose 0..3:
  // the contiguous layout sends nearly every row across.
  std::vector<int64_t> rows(4 * 8, 0);
  for (int64_t src = 0; src < 4; ++src)
    for (int64_t e = 0; e < 8; ++e)
      rows[src * 8 + e] = ((src < 2) == (e >= 4)) ? 10 : 1;
  const double before = serve::cross_rack_share(x, rows, rack);
  CHECK(before > 0.9);
  const auto plan = serve::plan_by_origin(x, rows, rack);
  REQUIRE(plan.check().ok());
  CHECK(serve::cross_rack_share(plan, rows, rack) < 0.1);
  for (int64_t r = 0; r < 4; ++r)
    CHECK(plan.end(0, r) - plan.begin(0, r) == 2);
  for (int32_t e = 0; e < 8; ++e)
    CHECK(rack[plan.rank_of(0, e)] == (e >= 4 ? 0 : 1));
  // Already placed by origin: nothing moves.
  const auto again = serve::plan_by_origin(plan, rows, rack);
  CHECK(again.order == plan.order);
  CHECK(again.bounds == plan.bounds);
}

TEST_CASE("experts moved live between steps: same tokens, none dropped",
          "[unit]") {
  const auto js = served_jobs(12);
  std::vector<served_outcome> fixed;
  {
    auto svc = start_service(ep_limits(4));
    fixed = serve_all_jobs(*svc, js);
  }
  auto l = ep_limits(4);
  // Every step a window, any crossing a reason to replan: the layout moves
  // as often as the plan improves on it.
  l.replan.rack = {0, 0, 1, 1};
  l.replan.max_cross_rack_share = 0.0;
  l.replan.window_steps = 1;
  auto svc = start_service(l);
  auto& s = *svc;
  check_same_outcomes(serve_all_jobs(s, js), fixed, js);
  s.stop();
  const auto g = s.metrics().gauges();
  CHECK(g.replans > 0);
  CHECK_FALSE(s.ranks()->layout()->is_contiguous());
  CHECK(s.preemptions() == 0);
  CHECK(s.metrics().render("m").find("tutti_serve_expert_replans_total{model="
                                     "\"m\"} 0\n")
        == std::string::npos);
}

TEST_CASE("serve.racks and serve.replan: refused by name", "[unit]") {
  CHECK(serve_refusal("  racks: [a, a, b, b]\n  replan: {max_cross_rack_share: "
                      "0.3, window_steps: 20}\n")
          .empty());
  CHECK(serve_refusal("  replan: {max_cross_rack_share: 0.3}\n")
          .find("serve.replan")
        != std::string::npos);
  CHECK(serve_refusal("  racks: [a, b]\n  replan: {max_cross_rack_share: 3}\n")
          .find("serve.replan.max_cross_rack_share")
        != std::string::npos);
  CHECK(serve_refusal(
          "  racks: [a, b]\n  offload: {stats: s, threshold: 0.1, rank: "
          "1}\n  replan: {window_steps: 5}\n")
          .find("serve.replan: not with serve.offload")
        != std::string::npos);
  CHECK(serve_refusal("  racks: a\n").find("serve.racks") != std::string::npos);

  serve::serve_config c;
  c.racks = {"a", "b", "a"};
  c.limits.ep_ranks = 2;
  auto r = serve::replan_for(c);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().rfind("serve.racks: ", 0) == 0);
  c.limits.ep_ranks = 3;
  r = serve::replan_for(c);
  REQUIRE(r.ok());
  CHECK(r.value().rack == std::vector<int32_t>{0, 1, 0});
  CHECK(r.value().max_cross_rack_share == 1.0); // measured, never replanned
}
