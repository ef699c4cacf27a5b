// Rack-limited routing: the group-limited sigmoid router (n_group,
// topk_group) with each group's experts in one rack keeps a token's experts
// within topk_group racks. Which layouts make it so (the EP group's racks,
// the placement), what the job's start line says, and a 4-rank job over 2
// racks whose cross-rack bytes per token fall against unrestricted routing.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "test_support.hpp"
#include "tutti/moe/rack_routing.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

constexpr int steps = 5;

// two_rack_config's job (8 experts, top-4, racks r0 r0 r1 r1 unless
// `racks` names the nodes' racks) with the sigmoid router in `groups`
// groups of which each token keeps `kept`.
std::string grouped_config(const std::string& data, const std::string& run,
                           int groups, int kept,
                           const std::string& racks = "0011") {
  auto text = two_rack_config(data, run, steps, 7471, true, false, 4);
  for (int n = 0; n < 4; ++n)
    text = replace_once(text,
                        "port: " + std::to_string(7471 + n) + ", rack: r"
                          + std::to_string(n / 2),
                        "port: " + std::to_string(7471 + n) + ", rack: r"
                          + racks[size_t(n)]);
  text = replace_once(text, "  aux_loss_coeff: 0.01\n",
                      "  aux_loss_coeff: 0\n  scoring_func: sigmoid\n"
                      "  n_group: "
                        + std::to_string(groups) + "\n  topk_group: "
                        + std::to_string(kept) + "\n");
  return text;
}

job_config parsed(const std::string& text) {
  auto cfg = parse_job_config(text, "rack routing test");
  INFO((cfg.ok() ? "" : cfg.error().message()));
  REQUIRE(cfg.ok());
  return cfg.value();
}

double mean_cross_rack_per_token(const std::filesystem::path& metrics) {
  std::ifstream in(metrics);
  std::string line;
  double sum = 0;
  int n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("alltoall_bytes_by_link")) {
      sum += j["alltoall_bytes_by_link"]["inter_rack"].get<double>()
             / j["tokens"].get<double>();
      ++n;
    }
  }
  REQUIRE(n == steps);
  return sum / n;
}

} // namespace

TEST_CASE("rack-limited routing: which layouts keep each group in one rack",
          "[unit]") {
  // Two groups over racks r0 r0 r1 r1: experts 0-3 on ranks 0-1 (r0).
  auto cfg = parsed(grouped_config("d", "r", 2, 1));
  auto r = moe::rack_routing_of(cfg, 0, {});
  CHECK(r.racks == 2);
  CHECK(r.rack_limited);
  CHECK_THAT(moe::rack_routing_note(cfg, r),
             Catch::Contains("in at most 1 of 2 racks"));
  // Four groups of two: one rank each, still one rack each.
  cfg = parsed(grouped_config("d", "r", 4, 2));
  CHECK(moe::rack_routing_of(cfg, 3, {}).rack_limited);
  // Racks r0 r1 r0 r1: experts 0-3 sit in both racks.
  cfg = parsed(grouped_config("d", "r", 2, 1, "0101"));
  r = moe::rack_routing_of(cfg, 0, {});
  CHECK(!r.rack_limited);
  CHECK_THAT(moe::rack_routing_note(cfg, r),
             Catch::Contains("group 0 (experts 0-3) of layer 0 spans 2 racks")
               && Catch::Contains("limits groups, not racks"));
  // A placement that swaps experts 3 and 4 in layer 1 breaks it there.
  cfg = parsed(grouped_config("d", "r", 2, 1));
  std::vector<int32_t> slots;
  for (int l = 0; l < 2; ++l)
    for (int32_t e = 0; e < 8; ++e)
      slots.push_back(l == 1 && (e == 3 || e == 4) ? 7 - e : e);
  r = moe::rack_routing_of(cfg, 0, slots);
  CHECK(!r.rack_limited);
  CHECK_THAT(r.spanning, Catch::Contains("of layer 1"));
  // One group, or one rack: nothing to say.
  cfg = parsed(grouped_config("d", "r", 1, 1));
  CHECK(moe::rack_routing_note(cfg, moe::rack_routing_of(cfg, 0, {})).empty());
  cfg = parsed(grouped_config("d", "r", 2, 1, "0000"));
  CHECK(moe::rack_routing_note(cfg, moe::rack_routing_of(cfg, 0, {})).empty());
}

TEST_CASE("rack-limited routing: a 4-rank job over 2 racks says so and "
          "sends fewer bytes across the racks than unrestricted routing",
          "[integration]") {
  const auto dir = scratch("rack_routing_job");
  const auto data = dir / "data";
  REQUIRE(run(tutti_bin() + " data synth --out " + data.string()
                + " --vocab 32 --seed 5 --tokens 20000",
              60)
            .status
          == 0);
  double cross[2];
  for (int limited = 0; limited < 2; ++limited) {
    const auto name = std::string(limited ? "limited" : "unrestricted");
    run_job(dir / (name + ".yaml"),
            grouped_config(data.string(), (dir / name).string(),
                           limited ? 2 : 1, 1),
            120);
    const auto log = read_text(dir / name / "tutti.log.jsonl");
    CHECK((log.find("rack-limited routing: each token's experts in at most 1 "
                    "of 2 racks")
           != std::string::npos)
          == bool(limited));
    cross[limited] = mean_cross_rack_per_token(dir / name / "metrics.jsonl");
  }
  WARN("cross-rack all-to-all bytes per token: unrestricted "
       << cross[0] << ", rack-limited " << cross[1]);
  // Top-4 of 8 over two racks nearly always reaches the other rack;
  // limited to one, about half the tokens stay home.
  CHECK(cross[1] > 0);
  CHECK(cross[1] < 0.75 * cross[0]);
}
