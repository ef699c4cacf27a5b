// The dashboard's server side: Prometheus text read back, the step log read
// as it grows (and anew after a rewind), the routes on a real metrics
// endpoint behind basic auth (401 without credentials, GET only), answers
// within 100 ms on a 128-expert x 61-layer job, and a report that carries
// its data inside one HTML file.

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "security_support.hpp"
#include "tutti/dashboard/dashboard.hpp"
#include "tutti/dashboard/prometheus_json.hpp"
#include "tutti/dashboard/report.hpp"
#include "tutti/dashboard/step_log.hpp"
#include "tutti/net/metrics_endpoint.hpp"
#include "tutti/security/web_config.hpp"

using namespace tutti;
using namespace tutti::testing;
using json = nlohmann::json;

namespace {

// A step record as the metrics writer writes it, counts [layers][experts].
std::string step_line(int64_t step, int64_t layers, int64_t experts,
                      std::mt19937& rng) {
  json j;
  j["step"] = step;
  j["loss"] = 3.0 - 0.01 * static_cast<double>(step);
  j["dropped_tokens"] = 1;
  j["tokens_per_s"] = 1000.5;
  auto& counts = j["expert_counts"] = json::array();
  std::uniform_int_distribution<int> tokens(0, 99);
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<int64_t> row;
    for (int64_t e = 0; e < experts; ++e)
      row.push_back(tokens(rng));
    counts.push_back(row);
  }
  return j.dump() + "\n";
}

std::string expert_metrics(int64_t layers, int64_t experts) {
  std::ostringstream m;
  m << "# HELP tutti_loss Training loss.\n# TYPE tutti_loss gauge\n"
       "tutti_loss 2.5\ntutti_job_step 7\n"
       "# TYPE tutti_expert_tokens gauge\n";
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t e = 0; e < experts; ++e)
      m << "tutti_expert_tokens{layer=\"" << l << "\",expert=\"" << e << "\"} "
        << (l * experts + e) % 97 << "\n";
  return m.str();
}

void append(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::app);
  out << text;
}

double sum_counts(const json& experts) {
  double sum = 0;
  for (const auto& row : experts.at("counts"))
    for (const auto& v : row)
      sum += v.get<double>();
  return sum;
}

} // namespace

TEST_CASE("Prometheus text reads back into samples, bad lines by number",
          "[dashboard]") {
  auto parsed = dashboard::parse_prometheus(
    "# HELP a An a.\n# TYPE a gauge\na 1.5\n"
    "b_bucket{le=\"+Inf\",path=\"x\\\"y\\\\z\"} 3 1700000000\n"
    "c NaN\nd +Inf\n");
  INFO(parsed.message());
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 4);
  CHECK((*parsed)[0].name == "a");
  CHECK((*parsed)[0].value == 1.5);
  CHECK((*parsed)[1].labels.at(1).second == "x\"y\\z");
  CHECK((*parsed)[1].value == 3);
  CHECK(std::isnan((*parsed)[2].value));
  const auto j = json::parse(dashboard::samples_json(*parsed, 5));
  CHECK(j["time_ms"] == 5);
  CHECK(j["metrics"]["b_bucket"][0][0]["le"] == "+Inf");
  CHECK(j["metrics"]["c"][0][1].is_null());
  CHECK(j["metrics"]["d"][0][1] == "+Inf");
  auto bad = dashboard::parse_prometheus("a 1\nb{x=\"1\" 2\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("line 2") != std::string::npos);
}

TEST_CASE("the step log is read as it grows, and anew after a rewind",
          "[dashboard]") {
  auto dir = scratch("dashboard_step_log");
  const auto file = dir / "metrics.jsonl";
  std::mt19937 rng(1);
  dashboard::step_log log(file, 8);
  CHECK(json::parse(log.json(0, 0))["steps"].empty()); // no file yet
  for (int s = 1; s <= 5; ++s)
    append(file, step_line(s, 2, 4, rng));
  // A line still being written is left for the next read.
  append(file, R"({"step":6,"loss":1)");
  auto first = json::parse(log.json(0, 2));
  CHECK(first["last_step"] == 5);
  REQUIRE(first["steps"].size() == 5);
  CHECK_FALSE(first["steps"][0].contains("expert_counts"));
  CHECK(first["experts"]["window"] == 2);
  CHECK(first["experts"]["layers"] == 2);
  CHECK(first["experts"]["dropped"] == 2);
  append(file, R"(,"dropped_tokens":0,"expert_counts":[[1,1,1,1],[2,2,2,2]]})"
               "\n");
  auto next = json::parse(log.json(5, 1));
  REQUIRE(next["steps"].size() == 1);
  CHECK(next["steps"][0]["step"] == 6);
  CHECK(sum_counts(next["experts"]) == 12);
  // Every step since the start: all six steps' counts.
  auto all = json::parse(log.json(0, 0));
  CHECK(all["experts"]["window"] == 6);
  CHECK(all["experts"]["dropped"] == 5);
  // A resume rewinds the file (an atomic replace): read from the start.
  {
    std::ofstream out(dir / "rewound.jsonl");
    out << step_line(1, 2, 4, rng) << step_line(2, 2, 4, rng);
  }
  std::filesystem::rename(dir / "rewound.jsonl", file);
  auto rewound = json::parse(log.json(0, 0));
  CHECK(rewound["last_step"] == 2);
  CHECK(rewound["steps"].size() == 2);
  // Thinned to max_rows, the newest kept.
  auto thin = json::parse(log.json(0, 0, 1));
  REQUIRE(thin["steps"].size() >= 1);
  CHECK(thin["steps"].back()["step"] == 2);
}

TEST_CASE("the dashboard is read-only, behind /metrics' basic auth, and "
          "answers a 128 x 61 job within 100 ms",
          "[dashboard]") {
  auto dir = scratch("dashboard_routes");
  const int64_t layers = 61, experts = 128;
  const auto steps_file = dir / "metrics.jsonl";
  std::mt19937 rng(2);
  std::string lines;
  for (int s = 1; s <= 150; ++s)
    lines += step_line(s, layers, experts, rng);
  append(steps_file, lines);
  const auto metrics_text = expert_metrics(layers, experts);

  dashboard::sources from;
  from.about.kind = "training";
  from.about.title = "synthetic";
  from.about.layers = layers;
  from.about.experts = experts;
  from.about.nodes = {{"127.0.0.1", "r0", 0, 8}};
  from.metrics = [&] { return metrics_text; };
  from.step_log = steps_file.string();
  from.events = [](int64_t since) {
    return std::vector<dashboard::timeline_event>{
      {since + 1, "alert", "expert_imbalance: <b>4.2</b>"}};
  };
  auto web_file = dir / "web.yaml";
  write_text(web_file, "basic_auth_users:\n  viewer: " + bcrypt("look") + "\n");
  auto web = security::load_web_config(web_file.string());
  REQUIRE(web.ok());
  auto endpoint = net::metrics_endpoint::start(
    "127.0.0.1", 0, [&] { return metrics_text; }, *web,
    dashboard::routes(from));
  REQUIRE(endpoint.ok());
  httplib::Client open("127.0.0.1", endpoint.value()->port());
  open.set_read_timeout(10, 0);
  httplib::Client viewer("127.0.0.1", endpoint.value()->port());
  viewer.set_read_timeout(10, 0);
  viewer.set_basic_auth("viewer", "look");

  // The first read parses the whole log; the page's polls after it read
  // only what was appended.
  auto timed = [&](const std::string& path, std::string& body) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = viewer.Get(path.c_str());
    const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
    REQUIRE(r);
    REQUIRE(r->status == 200);
    body = r->body;
    return ms;
  };
  std::string body;
  const double first_ms = timed("/dashboard/api/steps?since=0&window=100",
                                body);
  auto steps = json::parse(body);
  CHECK(steps["steps"].size() == 150);
  CHECK(steps["experts"]["window"] == 100);
  CHECK(steps["experts"]["counts"].size() == layers);
  CHECK(steps["experts"]["counts"][0].size() == experts);

  for (const char* path : {"/metrics", "/dashboard", "/dashboard/api/overview",
                           "/dashboard/api/metrics", "/dashboard/api/steps",
                           "/dashboard/api/events"}) {
    INFO(path);
    auto refused = open.Get(path);
    REQUIRE(refused);
    CHECK(refused->status == 401);
    CHECK(refused->get_header_value("WWW-Authenticate").find("Basic") == 0);
    auto wrong = httplib::Client("127.0.0.1", endpoint.value()->port());
    wrong.set_basic_auth("viewer", "guess");
    CHECK(wrong.Get(path)->status == 401);
    auto ok = viewer.Get(path);
    REQUIRE(ok);
    CHECK(ok->status == 200);
    // Nothing changes the job: no route takes another method.
    auto post = viewer.Post(path, "{}", "application/json");
    REQUIRE(post);
    CHECK(post->status == 405);
  }
  auto page = viewer.Get("/dashboard");
  CHECK(page->get_header_value("Content-Type").find("text/html") == 0);
  CHECK(page->body.find("/*@") == std::string::npos); // every asset inlined
  CHECK(page->body.find("drawHeatmap") != std::string::npos);
  // Nothing fetched from elsewhere: no external script, style or image.
  for (const char* external :
       {"src=\"http", "href=\"http", "url(http", "@import", "fetch(\"http"})
    CHECK(page->body.find(external) == std::string::npos);
  auto bad = viewer.Get("/dashboard/api/steps?since=ten");
  CHECK(bad->status == 400);
  CHECK(bad->body == "since must be a whole number\n");

  auto overview = json::parse(viewer.Get("/dashboard/api/overview")->body);
  CHECK(overview["experts"] == experts);
  CHECK(overview["nodes"][0]["rack"] == "r0");
  auto events = json::parse(viewer.Get("/dashboard/api/events?since=9")->body);
  CHECK(events[0]["time_ms"] == 10);
  CHECK(events[0]["text"] == "expert_imbalance: <b>4.2</b>");

  std::vector<double> polls;
  for (int i = 0; i < 5; ++i) {
    append(steps_file, step_line(151 + i, layers, experts, rng));
    const double steps_ms = timed(
      "/dashboard/api/steps?since=" + std::to_string(150 + i) + "&window=100",
      body);
    const double metrics_ms = timed("/dashboard/api/metrics", body);
    polls.push_back(std::max(steps_ms, metrics_ms));
  }
  auto m = json::parse(body);
  CHECK(m["metrics"]["tutti_expert_tokens"].size() == layers * experts);
  std::sort(polls.begin(), polls.end());
  WARN("128 x 61: first read of 150 steps " << first_ms
                                            << " ms; a poll's slowest answer, "
                                               "median of 5: "
                                            << polls[2] << " ms");
  CHECK(polls[2] < 100);
}

TEST_CASE("a report is one HTML file with the run inside it", "[dashboard]") {
  auto dir = scratch("dashboard_report");
  const auto steps_file = dir / "metrics.jsonl";
  std::mt19937 rng(3);
  for (int s = 1; s <= 12; ++s)
    append(steps_file, step_line(s, 2, 4, rng));
  dashboard::overview about;
  about.kind = "training";
  about.title = "run </script><script>alert(1)</script>";
  about.layers = 2;
  about.experts = 4;
  auto html = dashboard::report_html(about, steps_file,
                                     {{1, "checkpoint_committed", "step 10"}});
  const auto start = html.find("window.TUTTI_SNAPSHOT = ");
  REQUIRE(start != std::string::npos);
  const auto end = html.find(";</script>", start);
  REQUIRE(end != std::string::npos);
  // The title's "</script>" is escaped, so the snapshot is one script.
  auto text = html.substr(start + 24, end - start - 24);
  for (size_t at = 0; (at = text.find("<\\/", at)) != std::string::npos;)
    text.replace(at, 3, "</");
  auto snapshot = json::parse(text);
  CHECK(snapshot["overview"]["title"] == about.title);
  CHECK(snapshot["steps"]["steps"].size() == 12);
  CHECK(snapshot["windows"]["10"]["window"] == 10);
  CHECK(snapshot["windows"]["0"]["window"] == 12);
  CHECK(snapshot["events"][0]["kind"] == "checkpoint_committed");
  CHECK(html.find("src=\"http") == std::string::npos);
}
