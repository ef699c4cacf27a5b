// `tutti serve` is a full node too: `tutti status`, `tutti shell --connect`,
// `tutti logs` and `tutti chaos` given its serve config reach the running
// service on this machine (its front's loopback admin endpoints). chaos
// kill_expert kills a live expert shard actor while completions run: its
// supervisor restarts it, every request completes, and status counts the
// restart. A training job's commands are refused in one line, exit 1.
// Kills past every restart budget end `tutti serve` with exit 1 at once.

#include <catch2/catch.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <mutex>
#include <regex>
#include <thread>

#include "daemon_support.hpp"
#include "serve_http_support.hpp"
#include "serve_test_support.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;
using json = nlohmann::json;
using steady = std::chrono::steady_clock;

namespace {

// `tutti serve` of a tiny model on 2 expert-parallel ranks under
// scratch(name), its serve section ending in `extra`; ready on return.
struct tiny_serve {
  explicit tiny_serve(const std::string& name, const std::string& extra = "")
    : root(scratch(name)), port(port_block(75, 1)),
      config(root / "serve.yaml"), log(root / "serve.log") {
    write_random_export(root / "model",
                        serve_test_config(256, 32, 64, 2, 4, 2, 4, 2, 256),
                        43);
    write_text(config, tiny_service_yaml(root / "model", port, extra));
    process = std::make_unique<child_process>(
      std::vector<std::string>{tutti_bin(), "serve", config.string()}, log);
    REQUIRE(wait_until([&] { return serve_ready(port); }, 60));
  }
  fs::path root;
  int port;
  fs::path config, log;
  std::unique_ptr<child_process> process;
};

} // namespace

TEST_CASE("tutti status, shell, logs and chaos reach a running tutti serve",
          "[integration][fault]") {
  tiny_serve node("serve_node_clients");
  const auto &root = node.root, &config = node.config, &log = node.log;
  const int port = node.port;
  INFO("tutti serve: " << tail(read_text(log)));
  // The log next to the config, one file per port.
  const auto log_file = root
                        / ("tutti-serve-" + std::to_string(port)
                           + ".log.jsonl");
  CHECK(fs::exists(log_file));
  const std::string target = " " + config.string();

  auto status = run(tutti_bin() + " status" + target, 60);
  INFO(status.output);
  CHECK(status.status == 0);
  CHECK(has(status.output, "model        tiny on 127.0.0.1:"));
  CHECK(has(status.output, "state        ready"));
  CHECK(has(status.output, "2 of 2 shards up, restarts 0"));
  CHECK(has(status.output, "blocks used"));

  auto shell = run(
    tutti_bin() + " shell --connect" + target + " -c 'status; actors'", 60);
  INFO(shell.output);
  CHECK(shell.status == 0);
  CHECK(has(shell.output, "state        ready"));
  CHECK(has(shell.output, "expert_shard/1"));

  auto logs = run(tutti_bin() + " logs" + target + " --lines 3", 60);
  INFO(logs.output);
  CHECK(logs.status == 0);
  CHECK(has(logs.output, "\"time\""));
  CHECK(has(logs.output, "serving tiny on"));

  // What only a training job does: one line, exit 1.
  auto history = run(
    tutti_bin() + " shell --connect" + target + " -c 'config history'", 60);
  INFO(history.output);
  CHECK(history.status == 1);
  CHECK(has(history.output, "not available on a service"));
  auto hang = run(tutti_bin() + " chaos" + target + " hang_rank --rank 0", 60);
  INFO(hang.output);
  CHECK(hang.status == 1);
  CHECK(has(hang.output, "not available on a service"));

  // kill_expert while completions run: every one comes back whole.
  completion_load load(port, 2, 160);
  REQUIRE(wait_until([&] { return load.count() >= 2; }, 60));
  const auto chaos_start = steady::now();
  auto chaos = run(tutti_bin() + " chaos" + target + " kill_expert --rank 1",
                   60);
  const auto chaos_end = steady::now();
  INFO(chaos.output);
  CHECK(chaos.status == 0);
  CHECK(has(chaos.output, "killed expert_shard/1"));
  // Requests that started after the kill run on the restarted shard.
  REQUIRE(wait_until(
    [&] {
      std::lock_guard lock(load.mutex);
      int after = 0;
      for (const auto& d : load.finished)
        after += d.start > chaos_end;
      return after >= 2;
    },
    60));
  load.end();
  int overlapping = 0;
  for (const auto& d : load.finished) {
    INFO(d.problem);
    CHECK(d.whole);
    overlapping += d.start < chaos_end && d.end > chaos_start;
  }
  CHECK(overlapping >= 1);

  auto after = run(tutti_bin() + " status" + target + " --json", 60);
  INFO(after.output);
  CHECK(after.status == 0);
  auto j = json::parse(after.output, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j["ready"] == true);
  CHECK(j["expert_shards"]["up"] == 2);
  CHECK(j["expert_shards"]["restarts"].get<int64_t>() >= 1);
  CHECK(j["tokens"]["generated"].get<int64_t>() >= 160 * 4);
  auto warned = run(tutti_bin() + " logs" + target + " --level warn", 60);
  INFO(warned.output);
  CHECK(has(warned.output, "killed expert_shard/1"));

  node.process->signal(SIGTERM);
  CHECK(node.process->wait(30) == 0);
}

TEST_CASE("tutti serve exits non-zero when kills outlast its expert tier",
          "[integration][fault]") {
  // No tier restart: the shards' supervisor giving up (a 4th kill within a
  // minute) fails the replica.
  tiny_serve node("serve_node_tier_gives_up", "  expert_tier_restarts: 0\n");
  const auto &config = node.config, &log = node.log;
  auto& serve = *node.process;
  completion_load load(node.port, 2, 160);
  int kills = 0;
  steady::time_point last_kill;
  const auto deadline = steady::now() + std::chrono::seconds(60);
  while (serve.running() && steady::now() < deadline) {
    auto chaos = run(tutti_bin() + " chaos " + config.string()
                       + " kill_expert --rank " + std::to_string(kills % 2),
                     30);
    if (chaos.status == 0) {
      ++kills;
      last_kill = steady::now();
    }
  }
  load.end();
  INFO("tutti serve: " << tail(read_text(log)));
  const int status = serve.wait(10);
  const auto exited = steady::now();
  CHECK(status == 1);
  CHECK(kills >= 4);
  CHECK(has(read_text(log), "the expert tier gave up"));
  // It ends at once, not after a step's timeout (20 s here).
  CHECK(exited - last_kill < std::chrono::seconds(5));
}
