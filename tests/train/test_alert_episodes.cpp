// Alerts under a condition that comes and goes: a job whose expert
// imbalance hovers around alerts.expert_imbalance (this model's worst
// max/mean load is 1.1 - 1.4, step to step) fires the rule a few times,
// each firing with its resolution in the event log (the last at the job's
// end), and says once that it is flapping, where the bare rule (fire while
// over, resolve while under) would have fired at every crossing. The
// condition is read back from metrics.jsonl and replayed through
// alert_state, so the events are checked against what the rule must have
// done, step by step.

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include "test_support.hpp"
#include "tutti/observability/alert_state.hpp"
#include "tutti/store/job_store.hpp"

using namespace tutti::testing;
using tutti::observability::alert_change;
using tutti::observability::alert_state;
using tutti::observability::alert_timing;
namespace fs = std::filesystem;

namespace {

constexpr int experts = 4;

// Each step's worst max/mean expert load over the layers, as the
// coordinator's expert_imbalance rule computes it.
std::vector<double> imbalance_series(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("expert_counts"))
      continue;
    double worst = 0;
    for (const auto& layer : j["expert_counts"]) {
      double sum = 0, max = 0;
      for (const auto& c : layer) {
        sum += c.get<double>();
        max = std::max(max, c.get<double>());
      }
      if (sum > 0)
        worst = std::max(worst, max / (sum / experts));
    }
    out.push_back(worst);
  }
  return out;
}

} // namespace

TEST_CASE("a flapping condition fires a few times, each with its resolution",
          "[integration]") {
  auto job = scratch_with_data("alert_episodes");
  const alert_timing timing{2, 3, 3, 60};
  const double threshold = 1.2;
  auto cfg = small_config(job.data.string(), (job.dir / "run").string(), 2,
                          120);
  cfg += "alerts:\n  expert_imbalance: " + std::to_string(threshold)
         + "\n  hold_steps: " + std::to_string(timing.hold_steps)
         + "\n  clear_steps: " + std::to_string(timing.clear_steps)
         + "\n  flap_firings: " + std::to_string(timing.flap_firings)
         + "\n  flap_window_steps: " + std::to_string(timing.flap_window_steps)
         + "\n";
  write_text(job.dir / "c.yaml", cfg);
  auto r = run(
    tutti_bin() + " run " + (job.dir / "c.yaml").string() + " --quiet", 120);
  INFO(tail(r.output));
  REQUIRE(r.status == 0);

  // What the rule must have done, and what the bare rule would have.
  const auto series = imbalance_series(job.dir / "run" / "metrics.jsonl");
  REQUIRE(series.size() == 120);
  alert_state rule(timing);
  int bare = 0, fired = 0, flapping = 0;
  bool over_before = false;
  std::string expected; // F: fired, P: fired flapping, R: resolved
  for (double x : series) {
    const bool over = x > threshold;
    bare += over && !over_before;
    over_before = over;
    switch (rule.observe(over)) {
    case alert_change::fired:
      ++fired, expected += "F";
      break;
    case alert_change::flapping:
      ++fired, ++flapping, expected += "P";
      break;
    case alert_change::resolved:
      expected += "R";
      break;
    case alert_change::none:
      break;
    }
  }
  if (rule.firing())
    expected += "R"; // resolved by the job's end
  INFO("bare rule firings " << bare << ", expected events " << expected);
  REQUIRE(bare >= 8); // the condition did come and go
  CHECK(fired <= timing.flap_firings);
  CHECK(flapping == 1);

  // The event log: each firing, then its resolution, as replayed.
  auto db = tutti::store::job_store::open(job.dir / "run" / "state");
  REQUIRE(db.ok());
  auto events = db.value()->events();
  REQUIRE(events.ok());
  std::string sequence;
  for (const auto& e : events.value()) {
    if (e.kind == "alert" && has(e.detail, "important expert_imbalance"))
      sequence += has(e.detail, "expert_imbalance flapping (") ? "P" : "F";
    else if (e.kind == "alert_resolved" && has(e.detail, "expert_imbalance:"))
      sequence += "R";
  }
  CHECK(sequence == expected);
  CHECK(has(r.output, "ALERT important: expert_imbalance flapping (fired "
                        + std::to_string(timing.flap_firings) + " times in "
                        + std::to_string(timing.flap_window_steps) + " steps"));
}
