// observability: Prometheus text exposition (format details, escaping,
// histograms read back, and promtool's verdict: promtool is a test
// dependency). The /metrics endpoint that serves it is net's
// (test_net_metrics.cpp).

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tutti/observability/histogram.hpp"
#include "tutti/observability/prometheus_text.hpp"

using namespace tutti::observability;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A sample text that exercises every feature: labels that need escaping,
// a counter, special values, interleaved samples.
std::string realistic_text() {
  prometheus_text t;
  t.family("tutti_step_loss", "gauge", "Training loss of the last step.");
  t.family("tutti_tokens_total", "counter", "Tokens processed since start.");
  t.family("tutti_expert_load", "gauge",
           "Tokens routed to each expert\nin the last step (C:\\ path).");
  t.sample("tutti_step_loss", {}, 2.345678901234);
  t.sample("tutti_expert_load", {{"layer", "0"}, {"expert", "0"}}, 120);
  t.sample("tutti_tokens_total", {{"rank", "0"}}, 1e9);
  t.sample("tutti_expert_load", {{"layer", "0"}, {"expert", "1"}}, 0);
  t.sample("tutti_tokens_total", {{"rank", "1"}}, 1e9 + 1);
  t.family("tutti_grad_norm", "gauge", "Gradient norm, \"pre-clip\".");
  t.sample("tutti_grad_norm",
           {{"note", "quote \" backslash \\ newline \n end"}},
           std::numeric_limits<double>::quiet_NaN());
  t.family("tutti_lr", "gauge", "Learning rate.");
  t.sample("tutti_lr", {{"bound", "upper"}},
           std::numeric_limits<double>::infinity());
  t.sample("tutti_lr", {{"bound", "lower"}},
           -std::numeric_limits<double>::infinity());
  t.histogram_family("tutti_step_seconds", "Step time.");
  histogram steps({0.1, 0.25, 1});
  for (double v : {0.05, 0.2, 0.2, 0.7, 3.0})
    steps.observe(v);
  t.histogram_sample("tutti_step_seconds", {{"rank", "0"}}, steps.counts());
  t.histogram_sample("tutti_step_seconds", {{"rank", "1"}},
                     histogram({0.1, 0.25, 1}).counts());
  return t.str();
}

// One sample line read back: the metric name, its labels with their
// escapes undone, and the value.
struct parsed_sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The samples of an exposition text (comment lines skipped), read the way
// a scraper reads them; a line it cannot read fails the test.
std::vector<parsed_sample> parse_samples(const std::string& text) {
  std::vector<parsed_sample> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    INFO(line);
    parsed_sample s;
    size_t i = line.find_first_of("{ ");
    REQUIRE(i != std::string::npos);
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        const size_t eq = line.find("=\"", i);
        REQUIRE(eq != std::string::npos);
        const std::string label = line.substr(i, eq - i);
        std::string value;
        for (i = eq + 2; line.at(i) != '"'; ++i) {
          if (line[i] != '\\') {
            value += line[i];
            continue;
          }
          const char escaped = line.at(++i);
          REQUIRE((escaped == '\\' || escaped == '"' || escaped == 'n'));
          value += escaped == 'n' ? '\n' : escaped;
        }
        s.labels[label] = value;
        ++i; // the closing quote
        if (line.at(i) == ',')
          ++i;
      }
      ++i; // the closing brace
    }
    REQUIRE(line.at(i) == ' ');
    s.value = std::strtod(line.c_str() + i + 1, nullptr);
    out.push_back(s);
  }
  return out;
}

} // namespace

// --- exposition format -------------------------------------------------------

TEST_CASE("prometheus_text writes HELP and TYPE before samples",
          "[observability]") {
  prometheus_text t;
  t.family("tutti_loss", "gauge", "Loss of the last step.");
  t.sample("tutti_loss", {}, 1.5);
  t.sample("tutti_loss", {{"split", "eval"}}, 2);
  CHECK(t.str()
        == "# HELP tutti_loss Loss of the last step.\n"
           "# TYPE tutti_loss gauge\n"
           "tutti_loss 1.5\n"
           "tutti_loss{split=\"eval\"} 2\n");
}

TEST_CASE(
  "prometheus_text groups interleaved samples by family in declaration order",
  "[observability]") {
  prometheus_text t;
  t.family("b_metric", "gauge", "B.");
  t.family("a_total", "counter", "A.");
  t.sample("a_total", {{"k", "1"}}, 1);
  t.sample("b_metric", {{"k", "1"}}, 10);
  t.sample("a_total", {{"k", "2"}}, 2);
  t.sample("b_metric", {{"k", "2"}}, 20);
  CHECK(t.str()
        == "# HELP b_metric B.\n"
           "# TYPE b_metric gauge\n"
           "b_metric{k=\"1\"} 10\n"
           "b_metric{k=\"2\"} 20\n"
           "# HELP a_total A.\n"
           "# TYPE a_total counter\n"
           "a_total{k=\"1\"} 1\n"
           "a_total{k=\"2\"} 2\n");
}

TEST_CASE("prometheus_text escapes label values and HELP text",
          "[observability]") {
  prometheus_text t;
  t.family("m", "gauge", "say \"hi\" \\ then\nmore");
  t.sample("m", {{"path", "C:\\dir\\\"x\"\nnext"}, {"plain", "ok"}}, 1);
  CHECK(t.str()
        == "# HELP m say \"hi\" \\\\ then\\nmore\n"
           "# TYPE m gauge\n"
           "m{path=\"C:\\\\dir\\\\\\\"x\\\"\\nnext\",plain=\"ok\"} 1\n");
}

TEST_CASE(
  "prometheus_text prints values with round-trip precision and special values",
  "[observability]") {
  CHECK(format_sample_value(std::numeric_limits<double>::quiet_NaN()) == "NaN");
  CHECK(format_sample_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_sample_value(-std::numeric_limits<double>::infinity())
        == "-Inf");
  CHECK(format_sample_value(0) == "0");
  CHECK(format_sample_value(42) == "42");
  CHECK(format_sample_value(-3.5) == "-3.5");
  for (double v : {0.1, 1.0 / 3.0, 2.345678901234e-300, 1.7976931348623157e308,
                   123456789012345678.0}) {
    std::string text = format_sample_value(v);
    INFO(text);
    CHECK(std::strtod(text.c_str(), nullptr) == v);
  }
  prometheus_text t;
  t.family("m", "gauge", "h");
  t.sample("m", {{"v", "nan"}}, std::nan(""));
  t.sample("m", {{"v", "inf"}}, HUGE_VAL);
  t.sample("m", {{"v", "-inf"}}, -HUGE_VAL);
  CHECK(t.str()
        == "# HELP m h\n# TYPE m gauge\nm{v=\"nan\"} NaN\nm{v=\"inf\"} "
           "+Inf\nm{v=\"-inf\"} -Inf\n");
}

TEST_CASE("prometheus_text rejects invalid names, naming them",
          "[observability]") {
  prometheus_text t;
  for (const char* bad : {"", "1abc", "a-b", "a b", "ä", "x{y}"}) {
    INFO("metric name '" << bad << "'");
    CHECK_FALSE(is_valid_metric_name(bad));
    CHECK_THROWS_AS(t.family(bad, "gauge", "h"), std::invalid_argument);
  }
  CHECK_THROWS_WITH(t.family("a-b", "gauge", "h"), Catch::Contains("'a-b'"));
  for (const char* good : {"a", "_a", ":a", "a:b_c9", "tutti_step_loss"})
    CHECK(is_valid_metric_name(good));

  t.family("m", "gauge", "h");
  for (const char* bad : {"", "1a", "a:b", "a-b", "a b"}) {
    INFO("label name '" << bad << "'");
    CHECK_FALSE(is_valid_label_name(bad));
    CHECK_THROWS_AS(t.sample("m", {{bad, "v"}}, 1), std::invalid_argument);
  }
  CHECK_THROWS_WITH(t.sample("m", {{"bad-label", "v"}}, 1),
                    Catch::Contains("'bad-label'"));
  for (const char* good : {"a", "_a", "A9_b"})
    CHECK(is_valid_label_name(good));
  CHECK(
    t.str()
    == "# HELP m h\n# TYPE m gauge\n"); // failed samples leave nothing behind
}

TEST_CASE("prometheus_text requires _total on counters and known types",
          "[observability]") {
  prometheus_text t;
  CHECK_THROWS_WITH(t.family("tokens", "counter", "h"),
                    Catch::Contains("'tokens'") && Catch::Contains("_total"));
  CHECK_NOTHROW(t.family("tokens_total", "counter", "h"));
  CHECK_NOTHROW(
    t.family("tokens", "gauge", "h")); // gauges may be named anything valid
  CHECK_THROWS_AS(t.family("h", "histogram", "h"), std::invalid_argument);
  CHECK_THROWS_AS(t.family("s", "untyped", "h"), std::invalid_argument);
}

TEST_CASE("prometheus_text rejects inconsistent use", "[observability]") {
  prometheus_text t;
  CHECK_THROWS_WITH(t.sample("undeclared", {}, 1),
                    Catch::Contains("'undeclared'"));
  t.family("m", "gauge", "h");
  CHECK_NOTHROW(
    t.family("m", "gauge", "h")); // same declaration again is harmless
  CHECK_THROWS_AS(t.family("m", "gauge", "other help"), std::invalid_argument);
  CHECK_THROWS_AS(t.sample("m", {{"a", "1"}, {"a", "2"}}, 1),
                  std::invalid_argument);
  t.sample("m", {{"a", "1"}, {"b", "2"}}, 1);
  CHECK_THROWS_AS(t.sample("m", {{"b", "2"}, {"a", "1"}}, 1),
                  std::invalid_argument); // same series
  CHECK_NOTHROW(t.sample("m", {{"a", "1"}, {"b", "3"}}, 1));
}

TEST_CASE("prometheus_text output ends with a newline", "[observability]") {
  prometheus_text empty;
  CHECK(empty.str().empty());
  std::string text = realistic_text();
  REQUIRE_FALSE(text.empty());
  CHECK(text.back() == '\n');
}

TEST_CASE("promtool accepts the rendered text", "[observability][promtool]") {
  // promtool (Debian's prometheus, installed by deploy/install-deps.sh) is
  // required: without it this fails rather than pass unchecked.
  REQUIRE(std::system("command -v promtool >/dev/null 2>&1") == 0);
  auto dir = std::filesystem::temp_directory_path()
             / ("tutti_observability_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto input = dir / "metrics.txt";
  auto output = dir / "promtool.out";
  {
    std::ofstream out(input, std::ios::binary);
    out << realistic_text();
  }
  std::string command = "promtool check metrics < '" + input.string() + "' > '"
                        + output.string() + "' 2>&1";
  int rc = std::system(command.c_str());
  INFO("text:\n" << read_file(input));
  INFO("promtool said:\n" << read_file(output));
  CHECK(rc == 0);
  std::filesystem::remove_all(dir);
}

// --- label escaping and histograms ----------------------------------------

TEST_CASE("prometheus_text escapes a quote and a newline in a label value",
          "[observability]") {
  prometheus_text t;
  t.family("tutti_gateway_replica_up", "gauge", "up");
  t.sample("tutti_gateway_replica_up",
           {{"replica", "stable-\"1\"\nnext"}, {"version", "v\\2"}}, 1);
  CHECK(t.str()
        == "# HELP tutti_gateway_replica_up up\n"
           "# TYPE tutti_gateway_replica_up gauge\n"
           "tutti_gateway_replica_up{replica=\"stable-\\\"1\\\"\\nnext\","
           "version=\"v\\\\2\"} 1\n");
  // Read back, the value is what was given.
  auto samples = parse_samples(t.str());
  REQUIRE(samples.size() == 1);
  CHECK(samples[0].labels["replica"] == "stable-\"1\"\nnext");
  CHECK(samples[0].labels["version"] == "v\\2");
}

TEST_CASE("prometheus_text writes a histogram's buckets, sum and count once "
          "per family",
          "[observability]") {
  histogram h({0.5, 1, 2.5});
  for (double v : {0.25, 0.5, 0.75, 3.0})
    h.observe(v);
  prometheus_text t;
  t.histogram_family("tutti_latency_seconds", "Latency.");
  t.histogram_sample("tutti_latency_seconds", {{"model", "m"}}, h.counts());
  t.histogram_sample("tutti_latency_seconds", {{"model", "n"}},
                     histogram({0.5, 1, 2.5}).counts());
  CHECK(t.str()
        == "# HELP tutti_latency_seconds Latency.\n"
           "# TYPE tutti_latency_seconds histogram\n"
           "tutti_latency_seconds_bucket{model=\"m\",le=\"0.5\"} 2\n"
           "tutti_latency_seconds_bucket{model=\"m\",le=\"1\"} 3\n"
           "tutti_latency_seconds_bucket{model=\"m\",le=\"2.5\"} 3\n"
           "tutti_latency_seconds_bucket{model=\"m\",le=\"+Inf\"} 4\n"
           "tutti_latency_seconds_sum{model=\"m\"} 4.5\n"
           "tutti_latency_seconds_count{model=\"m\"} 4\n"
           "tutti_latency_seconds_bucket{model=\"n\",le=\"0.5\"} 0\n"
           "tutti_latency_seconds_bucket{model=\"n\",le=\"1\"} 0\n"
           "tutti_latency_seconds_bucket{model=\"n\",le=\"2.5\"} 0\n"
           "tutti_latency_seconds_bucket{model=\"n\",le=\"+Inf\"} 0\n"
           "tutti_latency_seconds_sum{model=\"n\"} 0\n"
           "tutti_latency_seconds_count{model=\"n\"} 0\n");
}

TEST_CASE("a rendered histogram parses back to what was observed",
          "[observability]") {
  const std::vector<double> bounds = {0.001, 0.0025, 0.01, 0.1, 1, 10};
  const std::vector<double> observed = {0.0005, 0.002, 0.002, 0.05,   0.05, 0.5,
                                        7.0,    20.0,  0.001, 0.0025, 1e-9};
  histogram h(bounds);
  double sum = 0;
  for (double v : observed) {
    h.observe(v);
    sum += v;
  }
  prometheus_text t;
  t.histogram_family("tutti_ttft_seconds", "Time to first token.");
  t.histogram_sample("tutti_ttft_seconds", {{"model", "quote\" and\nnewline"}},
                     h.counts());
  const auto samples = parse_samples(t.str());
  REQUIRE(samples.size() == bounds.size() + 3);
  // The buckets in order, each the observations at or below its bound.
  for (size_t i = 0; i <= bounds.size(); ++i) {
    const auto& s = samples[i];
    INFO("bucket " << i);
    CHECK(s.name == "tutti_ttft_seconds_bucket");
    CHECK(s.labels.at("model") == "quote\" and\nnewline");
    const double le = i < bounds.size()
                        ? std::strtod(s.labels.at("le").c_str(), nullptr)
                        : HUGE_VAL;
    if (i < bounds.size())
      CHECK(le == bounds[i]);
    else
      CHECK(s.labels.at("le") == "+Inf");
    const auto at_or_below = std::count_if(observed.begin(), observed.end(),
                                           [&](double v) { return v <= le; });
    CHECK(s.value == static_cast<double>(at_or_below));
  }
  const auto& sum_sample = samples[bounds.size() + 1];
  const auto& count_sample = samples[bounds.size() + 2];
  CHECK(sum_sample.name == "tutti_ttft_seconds_sum");
  CHECK(sum_sample.value == sum);
  CHECK(count_sample.name == "tutti_ttft_seconds_count");
  CHECK(count_sample.value == static_cast<double>(observed.size()));
  CHECK(count_sample.labels == sum_sample.labels);
}

TEST_CASE("prometheus_text refuses histograms used as other types and bad "
          "counts",
          "[observability]") {
  prometheus_text t;
  t.histogram_family("h_seconds", "h");
  t.family("g", "gauge", "g");
  histogram h({1, 2});
  CHECK_THROWS_AS(t.sample("h_seconds", {}, 1), std::invalid_argument);
  CHECK_THROWS_AS(t.histogram_sample("g", {}, h.counts()),
                  std::invalid_argument);
  CHECK_THROWS_WITH(t.histogram_sample("h_seconds", {{"le", "1"}}, h.counts()),
                    Catch::Contains("le"));
  auto wrong = h.counts();
  wrong.cumulative.pop_back();
  CHECK_THROWS_AS(t.histogram_sample("h_seconds", {}, wrong),
                  std::invalid_argument);
  wrong = h.counts();
  wrong.upper_bounds = {2, 1};
  CHECK_THROWS_AS(t.histogram_sample("h_seconds", {}, wrong),
                  std::invalid_argument);
  CHECK_NOTHROW(t.histogram_sample("h_seconds", {}, h.counts()));
  CHECK_THROWS_AS(t.histogram_sample("h_seconds", {}, h.counts()),
                  std::invalid_argument); // the same series twice
  CHECK_THROWS_AS(t.histogram_family("g", "g"), std::invalid_argument);
}
