// Gray release through `tutti gateway` (a child process that starts its own
// `tutti serve` replicas from published versions): a canary whose version
// is broken (NaN weights: every request an error) is rolled back by itself
// while no request to the stable version fails, with an event and the
// alert metric; a healthy canary goes through every step to 100% and
// becomes the stable version. `tutti rollout status` shows it.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "gateway_process.hpp"
#include "gateway_test_support.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// Publishes `model` as tiny@`version` and writes a serve config naming it.
fs::path published_config(const fs::path& root, const fs::path& model,
                          const std::string& version) {
  const auto reg = root / "registry";
  auto r = run(tutti_bin() + " publish " + model.string()
               + " --name tiny --version " + version + " --registry "
               + reg.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto file = root / ("serve-" + version + ".yaml");
  write_text(file, "serve:\n  model_version: tiny@" + version
                     + "\n  registry: " + reg.string()
                     + "\n  max_sequences: 8\n  max_batch_tokens: 256\n"
                       "  ep_size: 1\n");
  return file;
}

nlohmann::json admin(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(10, 0);
  auto r = c.Get(path.c_str());
  if (!r || r->status != 200)
    return nullptr;
  return nlohmann::json::parse(r->body);
}

bool all_replicas_healthy(int port, size_t n) {
  auto s = admin(port, "/admin/status");
  if (s.is_null() || s["replicas"].size() < n)
    return false;
  for (const auto& r : s["replicas"])
    if (!r["healthy"].get<bool>())
      return false;
  return true;
}

// Clients streaming until `stop`; results by the version that answered.
struct load {
  std::atomic<bool> stop{false};
  std::mutex m;
  std::map<std::string, std::pair<int, int>> by_version; // ok, failed
  std::vector<std::string> stable_failures;
  std::vector<std::thread> threads;
  void start(int port, int n, const std::string& stable) {
    for (int i = 0; i < n; ++i)
      threads.emplace_back([this, port, stable] {
        while (!stop) {
          auto r = complete(port, true, 8, 60);
          std::lock_guard<std::mutex> lock(m);
          auto& v = by_version[r.version];
          ++(r.complete ? v.first : v.second);
          if (!r.complete && r.version == stable)
            stable_failures.push_back(std::to_string(r.status) + " "
                                      + r.body.substr(0, 300));
        }
      });
  }
  void finish() {
    stop = true;
    for (auto& t : threads)
      t.join();
    threads.clear();
  }
  ~load() { finish(); }
};

} // namespace

TEST_CASE("a broken canary is rolled back by itself, stable never fails",
          "[integration][fault]") {
  const auto root = scratch("gateway_canary_broken");
  const auto v1 = published_config(root, gateway_model(root / "good", 5), "v1");
  const auto v2 = published_config(
    root, gateway_model(root / "broken", 6, /*broken=*/true), "v2");
  const int port = port_block(191, 1);
  gateway_process gw(root / "gateway.yaml", root / "gateway.log", port,
                     "127.0.0.1",
                     {"--replica-logs", (root / "replicas").string()});
  write_text(gw.config,
             "gateway:\n  health_interval_s: 0.2\n  breaker_failures: 3\n"
             "stable:\n  version: tiny@v1\n  serve_config: "
               + v1.string()
               + "\n  count: 1\ncanary:\n  version: tiny@v2\n"
                 "  serve_config: "
               + v2.string()
               + "\n  count: 1\n  steps: [10, 50, 100]\n  step_s: 30\n"
                 "  min_requests: 5\n  max_error_rate: 0.1\n");
  gw.start();
  INFO(read_text(gw.log));
  REQUIRE(wait_until([&] { return all_replicas_healthy(port, 2); }, 60));

  load l;
  l.start(port, 3, "tiny@v1");
  const auto began = std::chrono::steady_clock::now();
  const bool rolled_back = wait_until(
    [&] {
      auto s = admin(port, "/admin/status");
      return !s.is_null() && s["rollout"] == "rolled_back";
    },
    45);
  const double took = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - began)
                        .count();
  // After the rollback every request goes to the stable version.
  {
    std::lock_guard<std::mutex> lock(l.m);
    l.by_version.erase("tiny@v1");
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  l.finish();
  INFO("rollback after " << took << " s");
  REQUIRE(rolled_back);
  for (const auto& f : l.stable_failures)
    INFO(f);
  CHECK(l.stable_failures.empty());
  // The canary's requests before the rollback failed (it is broken); none
  // went to it afterwards.
  auto s = admin(port, "/admin/status");
  CHECK(s["alert"] == true);
  CHECK(s["canary_share_percent"] == 0);
  auto status = run(tutti_bin() + " rollout status 127.0.0.1:"
                    + std::to_string(port));
  CHECK(status.status == 0);
  CHECK(status.output.find("rolled_back") != std::string::npos);
  auto events = run(tutti_bin() + " rollout events 127.0.0.1:"
                    + std::to_string(port));
  CHECK(events.output.find("\"rollback\"") != std::string::npos);
  httplib::Client c("127.0.0.1", port);
  auto metrics = c.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("tutti_gateway_rollback_alert 1")
        != std::string::npos);
  CHECK(read_text(gw.log).find("gateway: rollback:") != std::string::npos);
  // Nothing left to roll back: the operator's command says so.
  auto again = run(tutti_bin() + " rollout rollback 127.0.0.1:"
                   + std::to_string(port));
  CHECK(again.status == 2);
}

TEST_CASE("a healthy canary is promoted through its steps",
          "[integration]") {
  const auto root = scratch("gateway_canary_good");
  const auto v1 = published_config(root, gateway_model(root / "a", 5), "v1");
  const auto v3 = published_config(root, gateway_model(root / "b", 7), "v3");
  const int port = port_block(193, 1);
  gateway_process gw(root / "gateway.yaml", root / "gateway.log", port,
                     "127.0.0.1",
                     {"--replica-logs", (root / "replicas").string()});
  write_text(gw.config,
             "gateway:\n  health_interval_s: 0.2\n"
             "stable:\n  version: tiny@v1\n  serve_config: "
               + v1.string()
               + "\n  count: 1\ncanary:\n  version: tiny@v3\n"
                 "  serve_config: "
               + v3.string()
               + "\n  count: 1\n  steps: [10, 50, 100]\n  step_s: 1\n"
                 "  min_requests: 3\n  max_error_rate: 0.1\n"
                 "  max_ttft_ratio: 20\n  max_tpot_ratio: 20\n");
  gw.start();
  INFO(read_text(gw.log));
  REQUIRE(wait_until([&] { return all_replicas_healthy(port, 2); }, 60));
  load l;
  l.start(port, 3, "tiny@v1");
  const bool promoted = wait_until(
    [&] {
      auto s = admin(port, "/admin/status");
      return !s.is_null() && s["rollout"] == "promoted";
    },
    50);
  l.finish();
  REQUIRE(promoted);
  CHECK(l.stable_failures.empty());
  CHECK(l.by_version["tiny@v3"].first > 0);
  CHECK(l.by_version["tiny@v3"].second == 0);
  auto events = admin(port, "/admin/events");
  std::vector<std::string> steps;
  for (const auto& e : events)
    if (e["kind"] == "canary_step" || e["kind"] == "promoted")
      steps.push_back(e["detail"].get<std::string>());
  REQUIRE(steps.size() == 4); // 10% at the start, 50%, 100%, promoted
  CHECK(steps[1].find("takes 50.0%") != std::string::npos);
  CHECK(steps[2].find("takes 100.0%") != std::string::npos);
  CHECK(steps[3].find("tiny@v3 is the stable version") != std::string::npos);
  // Now the new version answers.
  auto r = complete(port, false, 4);
  CHECK(r.status == 200);
  CHECK(r.version == "tiny@v3");
  auto s = admin(port, "/admin/status");
  CHECK(s["stable_version"] == "tiny@v3");
  CHECK(s["alert"] == false);
  // Chat requests go to the replicas too (this model has no chat template:
  // the replica's 400 naming it, not the gateway's 404).
  httplib::Client c("127.0.0.1", port);
  auto chat = c.Post("/v1/chat/completions",
                     R"({"messages":[{"role":"user","content":"hi"}]})",
                     "application/json");
  REQUIRE(chat);
  CHECK(chat->status == 400);
  CHECK(chat->body.find("has no chat_template") != std::string::npos);
}

TEST_CASE("tutti gateway and tutti rollout refuse bad input in one line",
          "[integration]") {
  const auto root = scratch("gateway_cli_bad");
  const std::vector<std::pair<std::string, std::string>> cases = {
    {"stable:\n  version: a\n", "stable.replicas"},
    {"stable:\n  version: a\n  replicas: [127.0.0.1:1]\ngateway:\n"
     "  breaker_open_s: -1\n",
     "gateway.breaker_open_s"},
    {"stable:\n  version: a\n  serve_config: " + (root / "absent.yaml").string()
       + "\n",
     "absent.yaml"},
    {"stable:\n  version: a\n  replicas: [127.0.0.1:1]\ncanary:\n"
     "  version: b\n  replicas: [127.0.0.1:2]\n  steps: [50, 200]\n",
     "canary.steps"},
    {"stable:\n  version: a\n  replicas: [127.0.0.1:1]\ngateway:\n"
     "  unknown_limit: 1\n",
     "gateway.unknown_limit: unknown key"},
  };
  int n = 0;
  for (const auto& [text, named] : cases) {
    const auto file = root / ("bad" + std::to_string(n++) + ".yaml");
    write_text(file, text);
    auto r = run(tutti_bin() + " gateway " + file.string()
                 + " --listen 127.0.0.1:0", 30);
    INFO(text);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find(named) != std::string::npos);
    CHECK(r.output.find("gateway on http://") == std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  CHECK(run(tutti_bin() + " rollout frob 127.0.0.1:1").status == 2);
  CHECK(run(tutti_bin() + " rollout status nowhere").status == 2);
  // Nothing listens there: a run-time failure, not a hang.
  auto none = run(tutti_bin() + " rollout status 127.0.0.1:1", 30);
  CHECK(none.status == 1);
}
