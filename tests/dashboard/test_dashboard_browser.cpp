// The dashboard in a real browser: headless Chromium (Debian's chromium)
// loads /dashboard from a live `tutti run` and a live `tutti serve`; the
// page must load without console errors, draw the loss curve, the heatmap
// and the serving charts from the process's own numbers (compared with
// metrics.jsonl and /metrics), and move on as steps advance; `tutti report`
// of the stopped run opens from its file with the same curves. Screenshots
// at 1280x800 are kept under BUILD/test-artifacts/dashboard/. Skipped,
// saying why, where Chromium is not installed.

#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <numeric>
#include <regex>

#include <unistd.h>

#include "daemon_support.hpp"
#include "serve_http_support.hpp"
#include "serve_test_support.hpp"
#include "test_support.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// Chromium's path on PATH, "" when it is not installed.
std::string chromium() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    for (const char* name : {"chromium", "chromium-browser"}) {
      const auto candidate = fs::path(dir) / name;
      if (::access(candidate.c_str(), X_OK) == 0)
        return candidate.string();
    }
  return "";
}

struct page_load {
  std::string dom, console;
};

// Chromium on `url` for `budget_ms` of virtual time (the page's timers run
// fast, its requests are real): the DOM it ends with, or a screenshot.
page_load load(const std::string& browser, const std::string& url,
               const fs::path& dir, const std::string& name, int budget_ms,
               bool screenshot) {
  const auto profile = dir / ("profile-" + name);
  const auto dom = dir / (name + ".html");
  const auto console = dir / (name + ".console.txt");
  const auto shot = dir / (name + ".png");
  std::string cmd = browser
                    + " --headless=new --no-sandbox --disable-gpu"
                      " --hide-scrollbars --no-first-run"
                      " --window-size=1280,800 --enable-logging=stderr --v=0"
                      " --user-data-dir="
                    + profile.string()
                    + " --virtual-time-budget=" + std::to_string(budget_ms);
  cmd += screenshot ? " --screenshot=" + shot.string() + " " + url
                    : " --dump-dom " + url + " > " + dom.string();
  auto r = run("sh -c '" + cmd + " 2> " + console.string() + "'", 60);
  INFO(cmd << "\n" << r.output << read_text(console));
  REQUIRE(r.status == 0);
  if (screenshot) {
    REQUIRE(fs::exists(shot));
    CHECK(fs::file_size(shot) > 20000); // a drawn page, not a blank one
    const auto kept = fs::path(binary_dir()) / "test-artifacts" / "dashboard";
    fs::create_directories(kept);
    fs::copy_file(shot, kept / (name + ".png"),
                  fs::copy_options::overwrite_existing);
  }
  return {screenshot ? std::string() : read_text(dom), read_text(console)};
}

// The start tag of the element with id `id`, and one of its attributes
// (string search: std::regex recurses too deep on a report's megabyte).
std::string tag(const std::string& dom, const std::string& id) {
  const auto at = dom.find(" id=\"" + id + "\"");
  if (at == std::string::npos)
    return "";
  const auto open = dom.rfind('<', at), close = dom.find('>', at);
  return open == std::string::npos || close == std::string::npos
           ? std::string()
           : dom.substr(open, close - open + 1);
}
std::string attribute(const std::string& element, const std::string& name) {
  const auto key = " " + name + "=\"";
  const auto at = element.find(key);
  if (at == std::string::npos)
    return "";
  const auto from = at + key.size();
  return element.substr(from, element.find('"', from) - from);
}
std::string body_attribute(const std::string& dom, const std::string& name) {
  const auto open = dom.find("<body");
  return open == std::string::npos
           ? std::string()
           : attribute(dom.substr(open, dom.find('>', open) - open + 1), name);
}

// The page loaded cleanly: updated from its data, no script error, and
// nothing on the console at all (Chromium logs every console message,
// errors, failed requests and uncaught exceptions as "...:CONSOLE...").
void check_clean(const page_load& page) {
  INFO(page.console);
  INFO(page.dom.substr(0, 4000));
  CHECK(std::stoi(body_attribute(page.dom, "data-updates")) >= 1);
  CHECK(body_attribute(page.dom, "data-errors") == "0");
  CHECK(page.console.find(":CONSOLE") == std::string::npos);
  CHECK(tag(page.dom, "problem").find("hidden") != std::string::npos);
}

std::map<int64_t, nlohmann::json> step_records(const fs::path& file) {
  std::map<int64_t, nlohmann::json> out;
  std::istringstream lines(read_text(file));
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object())
      out[j["step"].get<int64_t>()] = j;
  }
  return out;
}

// A sample's value in Prometheus text ("name value" or "name{...} value").
double scraped(const std::string& text, const std::string& sample) {
  std::smatch m;
  const std::regex line("\n" + sample + " ([^\n]+)");
  const std::string lines = "\n" + text;
  REQUIRE(std::regex_search(lines, m, line));
  return std::stod(m[1].str());
}

} // namespace

TEST_CASE("the dashboard in headless Chromium: a live tutti run and tutti "
          "serve",
          "[browser]") {
  const auto browser = chromium();
  if (browser.empty()) {
    std::printf("SKIPPED: no chromium here (Debian package chromium; "
                "deploy/install-deps.sh)\n");
    std::exit(77);
  }
  auto job = scratch_with_data("dashboard_browser");
  const int metrics_port = port_block(61, 1);
  const auto config = job.dir / "job.yaml";
  write_text(config, one_process_config(job.data.string(),
                                        (job.dir / "run").string(), 100000)
                       + "metrics:\n  port: " + std::to_string(metrics_port)
                       + "\n");
  // Held-out loss every 5 steps, so the page has a second curve.
  auto text = read_text(config);
  text.replace(text.find("  eval_sequences: 8\n"), 0, "  eval_interval: 5\n");
  write_text(config, text);
  const auto steps_file = job.dir / "run" / "metrics.jsonl";
  auto training = start_job(config, job.dir / "run.log", steps_file, 6);
  const auto base = "http://127.0.0.1:" + std::to_string(metrics_port);

  {
    auto first = load(browser, base + "/dashboard?refresh=600", job.dir,
                      "training-1", 3000, false);
    check_clean(first);
    const auto records = step_records(steps_file);
    // The loss curve's last point is the run's record of that step.
    const auto loss = tag(first.dom, "chart-loss");
    INFO(loss);
    const auto step = std::stoll(attribute(loss, "data-last-x"));
    REQUIRE(records.count(step));
    CHECK(std::stod(attribute(loss, "data-last-y"))
          == records.at(step)["loss"].get<double>());
    CHECK(std::stoi(attribute(loss, "data-points")) >= step);
    // The loss tile shows /metrics' tutti_loss at /metrics' step.
    const auto shown_step = std::stoll(body_attribute(first.dom, "data-step"));
    REQUIRE(records.count(shown_step));
    CHECK(std::stod(attribute(tag(first.dom, "tile-loss"), "data-value"))
          == records.at(shown_step)["loss"].get<double>());
    // The heatmap: every layer x expert cell, its tokens the records' sum
    // over the window it names.
    const auto heat = tag(first.dom, "heatmap");
    INFO(heat);
    CHECK(attribute(heat, "data-cells") == "8"); // 2 layers x 4 experts
    const auto heat_step = std::stoll(attribute(heat, "data-step"));
    const auto window = std::stoll(attribute(heat, "data-window"));
    REQUIRE(window >= 1);
    double tokens = 0;
    for (auto s = heat_step - window + 1; s <= heat_step; ++s)
      for (const auto& row : records.at(s)["expert_counts"])
        for (const auto& v : row)
          tokens += v.get<double>();
    CHECK(std::stod(attribute(heat, "data-sum")) == tokens);
    for (const char* chart : {"chart-throughput", "chart-split", "chart-grad",
                              "chart-lr", "chart-links", "chart-cross"})
      CHECK(std::stoi(attribute(tag(first.dom, chart), "data-points")) >= 1);
    CHECK(first.dom.find("<td>127.0.0.1</td>") != std::string::npos);
    CHECK(std::stoi(attribute(tag(first.dom, "timeline"), "data-events")) >= 1);

    // Steps advance and so does the page.
    REQUIRE(wait_until([&] { return count_lines(steps_file) > step + 3; }, 30));
    auto second = load(browser, base + "/dashboard?refresh=600", job.dir,
                       "training-2", 1500, false);
    check_clean(second);
    const auto later = tag(second.dom, "chart-loss");
    CHECK(std::stoll(attribute(later, "data-last-x")) > step);
    CHECK(std::stoll(body_attribute(second.dom, "data-step")) > shown_step);

    load(browser, base + "/dashboard", job.dir, "training", 2500, true);
  }

  {
    // The job stays up beside it: its metrics scrape is for the check of
    // the Grafana dashboards below.
    write_text(job.dir / "training-scrape.txt", scrape_metrics(metrics_port));
    const auto model = write_random_export(
      job.dir / "model", serve_test_config(256, 32, 64, 2, 4, 2, 4, 2, 64), 7);
    const auto serve_config = job.dir / "serve.yaml";
    write_text(serve_config, serve_yaml(model, 0, ""));
    serve_process serving(serve_config, job.dir / "serve.log", 60);
    INFO(serving.log_text);
    REQUIRE(serving.port != 0);
    REQUIRE(wait_until([&] { return serve_ready(serving.port); }, 30));
    auto client = local_client(serving.port);
    for (int i = 0; i < 3; ++i) {
      auto r = client.Post("/v1/completions",
                           R"({"prompt": "hello dashboard", "max_tokens": 6,
                               "temperature": 0})",
                           "application/json");
      REQUIRE(r);
      REQUIRE(r->status == 200);
    }
    const auto url = "http://127.0.0.1:" + std::to_string(serving.port);
    auto page = load(browser, url + "/dashboard?refresh=600", job.dir,
                     "serving-1", 2500, false);
    check_clean(page);
    const auto scrape = client.Get("/metrics");
    REQUIRE(scrape);
    write_text(job.dir / "serving-scrape.txt", scrape->body);
    const auto generated = scraped(
      scrape->body, "tutti_serve_generation_tokens_total\\{[^}]*\\}");
    CHECK(generated >= 3);
    CHECK(std::stod(attribute(tag(page.dom, "tile-generated"), "data-value"))
          == generated);
    CHECK(attribute(tag(page.dom, "heatmap"), "data-cells") == "8");
    CHECK(std::stod(attribute(tag(page.dom, "heatmap"), "data-sum")) > 0);
    for (const char* chart : {"chart-requests", "chart-ttft", "chart-kv"})
      CHECK(std::stoi(attribute(tag(page.dom, chart), "data-points")) >= 1);
    load(browser, url + "/dashboard", job.dir, "serving", 2500, true);

    // Every metric the Grafana dashboards use is in these live scrapes.
    auto checked = run(
      "python3 " + source_dir()
        + "/tests/dashboard/check_monitoring_files.py"
          " --source "
        + source_dir()
        + " --scrape training=" + (job.dir / "training-scrape.txt").string()
        + " --scrape serving=" + (job.dir / "serving-scrape.txt").string(),
      60);
    INFO(checked.output);
    CHECK((checked.status == 0 || checked.status == 77));
  }

  // The run stopped, its report: one file that opens offline with the same
  // curves (its last point the run's last record).
  training.reset();
  const auto report = job.dir / "report.html";
  auto wrote = run(tutti_bin() + " report " + (job.dir / "run").string()
                     + " --out " + report.string(),
                   60);
  INFO(wrote.output);
  REQUIRE(wrote.status == 0);
  auto offline = load(browser, "file://" + report.string(), job.dir, "report-1",
                      1000, false);
  check_clean(offline);
  const auto records = step_records(steps_file);
  REQUIRE_FALSE(records.empty());
  const auto last = records.rbegin();
  const auto curve = tag(offline.dom, "chart-loss");
  INFO(curve);
  CHECK(std::stoll(attribute(curve, "data-last-x")) == last->first);
  CHECK(std::stod(attribute(curve, "data-last-y"))
        == last->second["loss"].get<double>());
  CHECK(attribute(tag(offline.dom, "heatmap"), "data-cells") == "8");
  load(browser, "file://" + report.string(), job.dir, "report", 1000, true);
}
