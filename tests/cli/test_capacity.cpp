// Expert capacity on a real 2-rank job. capacity_factor 0 is dropless; 0.5
// must drop at every step (and say so in metrics and on the terminal) while
// the job still trains to a finite loss; a factor large enough to never bind
// must give exactly the dropless numbers. expert_counts (routing before the
// capacity cut, over the global batch) sum to tokens * top_k per layer.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <regex>

#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace tutti::testing;

namespace {

constexpr int world = 2;
constexpr int steps = 10;
constexpr int layers = 2;  // small_config: num_hidden_layers
constexpr int experts = 4; // small_config: num_experts
constexpr int top_k = 2;   // small_config: router_top_k
constexpr int global_batch = 8;
constexpr int seq_len = 32;
constexpr int step_tokens = global_batch * seq_len;

// expert_counts of each line of a metrics.jsonl: [step][layer][expert].
std::vector<std::vector<std::vector<long long>>> expert_counts(
  const fs::path& metrics) {
  std::vector<std::vector<std::vector<long long>>> out;
  std::ifstream in(metrics);
  std::string line;
  const std::regex field("\"expert_counts\":\\[(.*?)\\]\\]");
  const std::regex row("\\[([0-9,]*)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, field))
      continue;
    const std::string body = m[1].str() + "]";
    std::vector<std::vector<long long>> step;
    for (std::sregex_iterator it(body.begin(), body.end(), row), end; it != end;
         ++it) {
      std::vector<long long> counts;
      std::stringstream s((*it)[1].str());
      std::string n;
      while (std::getline(s, n, ','))
        counts.push_back(std::stoll(n));
      step.push_back(counts);
    }
    out.push_back(step);
  }
  return out;
}

struct job {
  fs::path run_dir;
  command_result result;
  fs::path metrics() const { return run_dir / "metrics.jsonl"; }
};

job run_job(const fs::path& dir, const fs::path& data, const std::string& name,
            double capacity_factor, bool quiet, int log_interval) {
  job j;
  j.run_dir = dir / name;
  auto text = small_config(data.string(), j.run_dir.string(), world, steps,
                           capacity_factor, global_batch);
  text = replace_line(text, "  log_interval: 10",
                      "  log_interval: " + std::to_string(log_interval));
  auto cfg = dir / (name + ".yaml");
  write_text(cfg, text);
  j.result = run(
    tutti_bin() + " run " + cfg.string() + (quiet ? " --quiet" : ""), 120);
  return j;
}

void check_expert_counts(const job& j) {
  const auto tokens = metric_series(j.metrics(), "tokens");
  const auto counts = expert_counts(j.metrics());
  REQUIRE(tokens.size() == steps);
  REQUIRE(counts.size() == steps);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s + 1);
    CHECK(tokens[s] == step_tokens);
    REQUIRE(counts[s].size() == layers);
    for (int l = 0; l < layers; ++l) {
      INFO("layer " << l);
      REQUIRE(counts[s][l].size() == experts);
      long long sum = 0;
      for (auto c : counts[s][l]) {
        CHECK(c >= 0);
        sum += c;
      }
      CHECK(sum == static_cast<long long>(tokens[s]) * top_k);
    }
  }
}

// The three jobs run once for all sections (a Catch2 test case re-runs its
// body for each section).
struct jobs {
  fs::path dir, data;
  job dropless, dropping, roomy;

  static const jobs& get() {
    static const jobs j = [] {
      jobs j;
      j.dir = scratch("capacity");
      j.data = j.dir / "data";
      require_synth_data(j.data, 32, 20000);
      j.dropless = run_job(j.dir, j.data, "cf0", 0.0, true, 10);
      j.dropping = run_job(j.dir, j.data, "cf05", 0.5, false, 2);
      // Capacity 4 * n * k / E = 2n per expert and rank: more than the n
      // tokens a rank can route to one expert, so it never binds.
      j.roomy = run_job(j.dir, j.data, "cf4", 4.0, true, 10);
      return j;
    }();
    return j;
  }
};

} // namespace

TEST_CASE("capacity factor: dropless, dropping, and never binding",
          "[integration]") {
  const auto& all = jobs::get();
  const auto& dropless = all.dropless;
  const auto& dropping = all.dropping;
  const auto& roomy = all.roomy;
  for (const job* j : {&dropless, &dropping, &roomy}) {
    INFO(j->run_dir.string() << "\n" << j->result.output);
    REQUIRE(j->result.status == 0);
  }

  SECTION("capacity_factor 0 drops nothing") {
    const auto dropped = metric_series(dropless.metrics(), "dropped_tokens");
    REQUIRE(dropped.size() == steps);
    for (int s = 0; s < steps; ++s) {
      INFO("step " << s + 1);
      CHECK(dropped[s] == 0);
    }
    check_expert_counts(dropless);
  }

  SECTION("capacity_factor 0.5 drops at every step and still trains") {
    const auto dropped = metric_series(dropping.metrics(), "dropped_tokens");
    REQUIRE(dropped.size() == steps);
    // Per rank and layer, capacity is ceil(0.5 * n * k / E) per expert, so
    // at most half of the n * k routed slots are kept: at least half of all
    // slots over ranks and layers are dropped, and never all of them.
    const double slots = double(layers) * step_tokens * top_k;
    for (int s = 0; s < steps; ++s) {
      INFO("step " << s + 1);
      CHECK(dropped[s] > 0);
      CHECK(dropped[s] >= slots / 2);
      CHECK(dropped[s] < slots);
    }
    check_expert_counts(dropping);

    const auto losses = metric_series(dropping.metrics(), "loss");
    REQUIRE(losses.size() == steps); // a non-finite loss is written as null
    for (double l : losses)
      CHECK(std::isfinite(l));
    CHECK(losses.back() < losses.front());
    // Dropping changes the computation: the losses are not the dropless ones.
    const auto dropless_losses = metric_series(dropless.metrics(), "loss");
    REQUIRE(dropless_losses.size() == steps);
    double largest = 0;
    for (int s = 0; s < steps; ++s)
      largest = std::max(largest, std::abs(losses[s] - dropless_losses[s]));
    CHECK(largest > 1e-4);
    const auto eval = metric_series(dropping.metrics(), "eval_loss");
    REQUIRE_FALSE(eval.empty());
    CHECK(std::isfinite(eval.back()));

    // The terminal lines (log_interval 2: steps 2, 4, ..., 10) report the
    // same drop counts as metrics.jsonl.
    const std::regex line("step +([0-9]+)/" + std::to_string(steps)
                          + " .* dropped ([0-9]+)");
    int lines = 0;
    const auto& out = dropping.result.output;
    for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end;
         ++it) {
      const int step = std::stoi((*it)[1].str());
      const long long n = std::stoll((*it)[2].str());
      INFO((*it)[0].str());
      CHECK(n > 0);
      REQUIRE(step >= 1);
      REQUIRE(step <= steps);
      CHECK(step % 2 == 0);
      CHECK(n == static_cast<long long>(dropped[step - 1]));
      ++lines;
    }
    INFO(out);
    CHECK(lines == steps / 2);
  }

  SECTION("a capacity that never binds equals dropless") {
    const auto dropped = metric_series(roomy.metrics(), "dropped_tokens");
    REQUIRE(dropped.size() == steps);
    for (double d : dropped)
      CHECK(d == 0);
    const auto a = metric_series(dropless.metrics(), "loss");
    const auto b = metric_series(roomy.metrics(), "loss");
    REQUIRE(a.size() == steps);
    REQUIRE(b.size() == steps);
    for (int s = 0; s < steps; ++s) {
      INFO("step " << s + 1);
      // The same computation: equal up to run-to-run float noise, if any.
      CHECK(b[s] == Approx(a[s]).epsilon(1e-6));
    }
  }
}
