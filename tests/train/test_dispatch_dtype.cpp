// moe_config.dispatch_dtype int8 / fp8 in whole jobs: the same losses at
// EP 1 and EP 2 (every exchange quantizes, the group of one included),
// near float32's; the dispatch's bytes in the step metrics at (d + 4) /
// 4d of float32's, as `tutti plan` predicts them; an unknown dtype
// refused in one line.

#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

using namespace tutti::testing;

namespace {

constexpr int kSteps = 30;
constexpr double kHidden = 32; // small_config's hidden_size

std::string with_dtype(std::string config, const std::string& dtype) {
  const std::string at = "moe_config:\n";
  config.insert(config.find(at) + at.size(),
                "  dispatch_dtype: " + dtype + "\n");
  return config;
}

struct job_result {
  std::vector<double> loss, alltoall_bytes;
  double planned_alltoall_bytes = 0;
};

job_result train(const std::filesystem::path& dir, const std::string& data,
                 const std::string& dtype, int world) {
  const auto name = dtype + "_w" + std::to_string(world);
  const auto config = dir / (name + ".yaml");
  const auto text = with_dtype(
    small_config(data, (dir / name).string(), world, kSteps), dtype);
  run_job(config, text);
  job_result r;
  r.loss = metric_series(dir / name / "metrics.jsonl", "loss");
  r.alltoall_bytes = metric_series(dir / name / "metrics.jsonl",
                                   "alltoall_bytes");
  const auto plan = run(tutti_bin() + " plan " + config.string() + " --json",
                        30);
  INFO("plan: " << plan.output);
  REQUIRE(plan.status == 0);
  const auto j = nlohmann::json::parse(plan.output, nullptr, false);
  REQUIRE(j.is_object());
  r.planned_alltoall_bytes = j["alltoall_bytes"].get<double>();
  return r;
}

double worst_relative(const std::vector<double>& a,
                      const std::vector<double>& b) {
  double worst = 0;
  for (size_t s = 0; s < a.size() && s < b.size(); ++s)
    worst = std::max(worst, std::abs(a[s] - b[s]) / std::abs(b[s]));
  return worst;
}

} // namespace

TEST_CASE("int8 and fp8 dispatch: EP-invariant losses near fp32's, a "
          "quarter of the dispatch's bytes, as planned",
          "[integration]") {
  auto [dir, data] = scratch_with_data("dispatch_dtype");
  const auto fp32 = train(dir, data.string(), "fp32", 2);
  REQUIRE(fp32.loss.size() == kSteps);
  for (const std::string dtype : {"int8", "fp8"}) {
    const auto one = train(dir, data.string(), dtype, 1);
    const auto two = train(dir, data.string(), dtype, 2);
    REQUIRE(one.loss.size() == kSteps);
    REQUIRE(two.loss.size() == kSteps);
    // EP size changes the float32 sums' order as for fp32 dispatch
    // (test_world_size_invariance), not what is quantized.
    const double across_ep = worst_relative(two.loss, one.loss);
    CHECK(across_ep <= 1e-4);
    const double from_fp32 = worst_relative(two.loss, fp32.loss);
    WARN(dtype << ": largest relative loss difference EP 1 vs 2: " << across_ep
               << ", against fp32 dispatch: " << from_fp32);
    CHECK(from_fp32 <= 2e-3); // measured 3e-4 (int8), 2.4e-4 (fp8)
    CHECK(two.loss.back() < two.loss.front() - 0.05);

    // Bytes: of the four crossings a row makes (dispatch and combine,
    // forward and backward), the forward dispatch now carries d codes and
    // a 4-byte scale per row: (d + 4) / 4d of float32's.
    REQUIRE(two.alltoall_bytes.size() == kSteps);
    const double ratio = (kHidden + 4) / (4 * kHidden);
    for (int s = 0; s < kSteps; ++s) {
      const double dispatch_fp32 = fp32.alltoall_bytes[s] / 4;
      const double dispatch = two.alltoall_bytes[s] - 3 * dispatch_fp32;
      INFO(dtype << " step " << s + 1 << ": " << two.alltoall_bytes[s]
                 << " bytes, fp32 " << fp32.alltoall_bytes[s] << ", plan "
                 << two.planned_alltoall_bytes);
      CHECK(dispatch == Approx(dispatch_fp32 * ratio).epsilon(1e-12));
      CHECK(two.alltoall_bytes[s] == two.planned_alltoall_bytes);
      CHECK(one.alltoall_bytes[s] == one.planned_alltoall_bytes);
    }
    CHECK(fp32.alltoall_bytes[0] == fp32.planned_alltoall_bytes);
  }
}

TEST_CASE("an unknown dispatch_dtype is refused in one line naming it",
          "[integration]") {
  auto dir = scratch("dispatch_dtype_refused");
  const auto config = dir / "int4.yaml";
  write_text(config, with_dtype(small_config((dir / "data").string(),
                                             (dir / "run").string(), 1, 1),
                                "int4"));
  const auto r = run(tutti_bin() + " plan " + config.string(), 30);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("moe_config.dispatch_dtype") != std::string::npos);
  CHECK(r.output.find("fp32, int8 or fp8") != std::string::npos);
}

TEST_CASE("int8 dispatch through the runs, Gloo's all_to_all_v and the rack "
          "relays: the same bits",
          "[integration]") {
  // 4 ranks on 4 nodes in 2 racks, 8 experts, top-4: in memory (the
  // in-process runs), over Gloo on loopback (the flat exchange), and
  // through the relays.
  auto [dir, data] = scratch_with_data("dispatch_dtype_exchanges");
  auto racked = [&](const std::string& name, bool rack_aware, bool tcp) {
    const auto text = with_dtype(
      two_rack_config(data.string(), (dir / name).string(), 5, 7381,
                      rack_aware, tcp),
      "int8");
    run_job(dir / (name + ".yaml"), text, 120);
    const auto series = training_series(dir / name / "metrics.jsonl");
    REQUIRE(series.size() == 4 * 5);
    return series;
  };
  const auto runs = racked("runs", false, false);
  CHECK(racked("flat_gloo", false, true) == runs);
  CHECK(racked("rack", true, false) == runs);
}
