// Serving's rack-aware all-to-all (serve.rack_aware_alltoall): a replica
// of 4 ranks in 2 racks (serve.racks) serves the same greedy and seeded
// requests with the same tokens and log-probabilities through the relays
// as through the flat exchange, to the bit, and sends fewer bytes across
// racks (a token whose 2 experts sit in one remote rack crosses once);
// /metrics counts the bytes by link. The key needs serve.racks.

#include <catch2/catch.hpp>

#include <algorithm>

#include "serve_requests.hpp"
#include "tutti/placement/plan.hpp"
#include "tutti/config/serve_config.hpp"
#include "tutti/serve/serve_layout.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

struct served_run {
  std::vector<served_outcome> outcomes;
  serve::serve_gauges gauges;
  std::string metrics;
};

served_run serve_racked(const std::vector<int32_t>& racks, bool rack_aware,
                        std::shared_ptr<const serve::expert_layout> layout,
                        const std::vector<served_job>& js) {
  auto l = ep_limits(4);
  l.replan.rack = racks; // measured only: max share 1
  l.rack_aware_alltoall = rack_aware;
  l.layout = std::move(layout);
  auto svc = start_service(l);
  auto& s = *svc;
  REQUIRE(s.shards_up());
  served_run out;
  out.outcomes = serve_all_jobs(s, js);
  s.stop();
  out.gauges = s.metrics().gauges();
  out.metrics = s.metrics().render("m");
  return out;
}

int64_t link(const served_run& r, serve::link_class l) {
  return r.gauges.all_to_all_link_bytes[static_cast<int>(l)];
}

} // namespace

TEST_CASE("rack-aware serving: same tokens as flat, fewer bytes across racks",
          "[unit]") {
  const auto js = served_jobs(12);
  const std::vector<int32_t> racks = {0, 0, 1, 1};
  const auto flat = serve_racked(racks, false, nullptr, js);
  const auto relayed = serve_racked(racks, true, nullptr, js);
  check_same_outcomes(relayed.outcomes, flat.outcomes, js);

  using serve::link_class;
  // Flat: every rank's bytes, each counted once by link.
  int64_t sum = 0;
  for (auto b : flat.gauges.all_to_all_link_bytes)
    sum += b;
  CHECK(sum == flat.gauges.all_to_all_bytes);
  CHECK(link(flat, link_class::inter_rack) > 0);
  // Contiguous experts: rack 1 holds 4 of 8, so about one token in five
  // chose two experts there and crosses once instead of twice.
  CHECK(link(relayed, link_class::inter_rack)
        < link(flat, link_class::inter_rack));
  // The relays fan out inside the rack instead.
  CHECK(link(relayed, link_class::intra_rack)
        > link(flat, link_class::intra_rack));
  INFO(relayed.metrics);
  CHECK(relayed.metrics.find(
          "tutti_serve_alltoall_bytes_total{model=\"m\","
          "link=\"inter_rack\"} "
          + std::to_string(link(relayed, link_class::inter_rack)))
        != std::string::npos);
  CHECK(relayed.metrics.find("tutti_serve_alltoall_cross_rack_share{model="
                             "\"m\"} 0.")
        != std::string::npos);
}

TEST_CASE("rack-aware serving: interleaved racks and a shuffled plan",
          "[unit]") {
  // Ranks of a rack not adjacent and ranks holding other experts than
  // their neighbours: relays and the regrouping cover any layout.
  auto p = placement::placement_plan::contiguous(2, 8, 4);
  std::mt19937 rng(23);
  for (int64_t l = 0; l < 2; ++l)
    std::shuffle(p.expert_at.begin() + l * 8, p.expert_at.begin() + (l + 1) * 8,
                 rng);
  REQUIRE(p.check().ok());
  auto plan = std::make_shared<const serve::expert_layout>(
    serve::expert_layout::from_plan(p));
  const auto js = served_jobs(8);
  const std::vector<int32_t> racks = {0, 1, 1, 0};
  const auto flat = serve_racked(racks, false, plan, js);
  const auto relayed = serve_racked(racks, true, plan, js);
  check_same_outcomes(relayed.outcomes, flat.outcomes, js);
  CHECK(link(relayed, serve::link_class::inter_rack)
        < link(flat, serve::link_class::inter_rack));
}

TEST_CASE("serve.rack_aware_alltoall: needs serve.racks", "[unit]") {
  CHECK(serve_refusal("  racks: [a, a, b, b]\n  rack_aware_alltoall: true\n")
          .empty());
  CHECK(serve_refusal("  rack_aware_alltoall: true\n")
          .find("serve.rack_aware_alltoall: needs serve.racks")
        != std::string::npos);
  CHECK(serve_refusal("  racks: [a, b]\n  rack_aware_alltoall: maybe\n")
          .find("serve.rack_aware_alltoall")
        != std::string::npos);
  auto c = serve::parse_serve_config(
    "serve:\n  model: m\n  racks: [a, b]\n  rack_aware_alltoall: true\n",
    "test");
  REQUIRE(c.ok());
  CHECK(c.value().limits.rack_aware_alltoall);
}
