// Serving with a placement plan (serve.placement): experts live on the
// ranks the plan names, layer by layer, and a replica of 2 or 4 ranks
// serves the same greedy and seeded requests with the same tokens and
// log-probabilities as the contiguous placement, to the bit. A plan that
// does not fit the model or the replica is refused naming the key.

#include <catch2/catch.hpp>

#include <algorithm>

#include "serve_requests.hpp"
#include "tutti/placement/plan.hpp"
#include "tutti/serve/serve_layout.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

// Each layer its own shuffle of the experts: far from contiguous.
placement::placement_plan shuffled_plan(int64_t layers, int64_t experts,
                                        int64_t ranks, uint32_t seed) {
  auto p = placement::placement_plan::contiguous(layers, experts, ranks);
  std::mt19937 rng(seed);
  for (int64_t l = 0; l < layers; ++l)
    std::shuffle(p.expert_at.begin() + l * experts,
                 p.expert_at.begin() + (l + 1) * experts, rng);
  REQUIRE(p.check().ok());
  REQUIRE_FALSE(p.is_contiguous());
  return p;
}

std::vector<served_outcome> serve_with(
  std::shared_ptr<const serve::expert_layout> layout, int64_t ranks,
  const std::vector<served_job>& js) {
  auto l = ep_limits(ranks);
  l.layout = std::move(layout);
  auto svc = start_service(l);
  auto& s = *svc;
  CHECK(s.shards_up());
  auto out = serve_all_jobs(s, js);
  s.stop();
  return out;
}

serve::serve_config config_with_plan(const std::filesystem::path& plan,
                                     int64_t ranks) {
  serve::serve_config c;
  c.placement = plan.string();
  c.limits.ep_ranks = ranks;
  return c;
}

} // namespace

TEST_CASE("a plan's layout puts each expert on the rank the plan names",
          "[unit]") {
  const auto p = shuffled_plan(2, 8, 4, 3);
  const auto x = serve::expert_layout::from_plan(p);
  REQUIRE(x.check().ok());
  CHECK_FALSE(x.is_contiguous());
  for (int64_t l = 0; l < 2; ++l)
    for (int32_t e = 0; e < 8; ++e)
      CHECK(x.rank_of(l, e) == p.rank_of(l, e));
  CHECK(serve::expert_layout::contiguous(2, 8, 4).value().is_contiguous());
  CHECK_FALSE(serve::expert_layout::contiguous(2, 8, 3).ok());
}

TEST_CASE("served tokens and logprobs: a shuffled plan equals contiguous",
          "[unit]") {
  const auto js = served_jobs(10);
  for (int64_t ranks : {2, 4}) {
    INFO(ranks << " ranks");
    const auto contiguous = serve_with(nullptr, ranks, js);
    auto plan = std::make_shared<const serve::expert_layout>(
      serve::expert_layout::from_plan(shuffled_plan(2, 8, ranks, 11)));
    check_same_outcomes(serve_with(plan, ranks, js), contiguous, js);
  }
}

TEST_CASE("serve.placement: a plan file is read, checked and applied",
          "[unit]") {
  const auto dir = scratch("serve_placement");
  const auto shape = eight_expert_model().shape;
  const auto file = dir / "plan.json";
  REQUIRE(shuffled_plan(2, 8, 2, 5).write(file).ok());
  auto fits = serve::layout_for(config_with_plan(file, 2), shape);
  REQUIRE(fits.ok());
  REQUIRE(fits.value());
  CHECK(fits.value()->ranks == 2);
  CHECK_FALSE(fits.value()->is_contiguous());

  // No key: no layout (contiguous, as before).
  serve::serve_config none;
  none.limits.ep_ranks = 2;
  auto plain = serve::layout_for(none, shape);
  REQUIRE(plain.ok());
  CHECK_FALSE(plain.value());

  // Another rank count, another shape, no file, not a plan.
  auto other_ranks = serve::layout_for(config_with_plan(file, 4), shape);
  REQUIRE_FALSE(other_ranks.ok());
  CHECK(other_ranks.message().rfind("serve.placement: ", 0) == 0);
  CHECK(other_ranks.message().find("on 2 ranks") != std::string::npos);
  CHECK(other_ranks.message().find("on 4 ranks") != std::string::npos);
  const auto wide = dir / "wide.json";
  REQUIRE(shuffled_plan(3, 8, 2, 5).write(wide).ok());
  auto other_layers = serve::layout_for(config_with_plan(wide, 2), shape);
  REQUIRE_FALSE(other_layers.ok());
  CHECK(other_layers.message().find("3 layers") != std::string::npos);
  auto missing = serve::layout_for(config_with_plan(dir / "no.json", 2), shape);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message().rfind("serve.placement: ", 0) == 0);
  write_text(dir / "bad.json", "{\"format\": \"something else\"}");
  auto bad = serve::layout_for(config_with_plan(dir / "bad.json", 2), shape);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().rfind("serve.placement: ", 0) == 0);
  CHECK(bad.message().find('\n') == std::string::npos);
}
