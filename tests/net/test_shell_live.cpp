// The shell and observability against a live 2-daemon job: every command
// of `tutti shell -c` with its exit status, bad input included; /metrics
// scraped and checked by promtool, its expert counts equal to
// metrics.jsonl's for the same step; alert rules that must and must not
// fire; and the interactive shell driven through a real terminal (tmux).

#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <sstream>

#include "shell_support.hpp"

using namespace tutti::testing;

TEST_CASE("tutti shell -c: every command, with its exit status",
          "[shell_script]") {
  live_job job("shell_script", 51);
  std::string via; // node 1's daemon until it is drained, then the config
  auto ok = [&](const std::string& cmds, const std::string& flags = "") {
    auto r = job.shell(cmds, flags, via);
    INFO(cmds << "\n" << r.output);
    CHECK(r.status == 0);
    return r.output;
  };
  auto refused = [&](const std::string& cmds, int status,
                     const std::string& says) {
    auto r = job.shell(cmds, "--yes");
    INFO(cmds << "\n" << r.output);
    CHECK(r.status == status);
    CHECK(has(r.output, says));
  };

  CHECK(has(ok("status"), "state        running"));
  CHECK(has(ok("status", "--json"), "\"state\":\"running\""));
  CHECK(has(ok("nodes"), "127.0.0.1:" + std::to_string(job.port + 2)));
  auto actors = ok("actors");
  CHECK(has(actors, "node1/expert_shard/2"));
  CHECK(has(actors, "node0/checkpoint_writer"));
  CHECK(has(actors, "node1/rank/3"));
  CHECK(has(ok("actors node0/data_loader"), "node0/data_loader/1"));
  CHECK(has(ok("experts 0"), "layer 0"));
  CHECK(has(ok("experts", "--json"), "\"layer\":1"));
  CHECK(has(ok("metrics tutti_loss"), "tutti_loss "));
  CHECK(has(ok("events --since 10m"), "job_started"));
  CHECK(has(ok("logs --lines 5"), "\"time\""));
  CHECK(has(ok("logs --node 1 --level info --lines 50"), "\"node\":\"1\""));
  CHECK(has(ok("help"), "experts [LAYER]"));
  CHECK(has(ok("help status"), "status"));
  CHECK(has(ok("checkpoint"), "checkpoint after the next step"));
  CHECK(has(ok("pause"), "pausing"));
  REQUIRE(wait_until(
    [&] { return has(job.shell("actors node0/rank").output, "paused"); }, 30));
  CHECK(has(ok("status"), "state        paused"));
  CHECK(has(ok("resume"), "resuming"));
  CHECK(has(ok("restart node1/expert_shard/2"), "restarting"));
  CHECK(has(ok("kill node1/expert_shard/3", "--yes"), "killed"));
  REQUIRE(wait_until(
    [&] {
      return std::regex_search(job.shell("actors node1/expert_shard/3").output,
                               std::regex("expert_shard/3 +expert_shard +"
                                          "running +1 "));
    },
    30));
  CHECK(has(ok("status; nodes"), "rack"));
  // Alerts: the imbalance rule fires, the loss-spike rule does not.
  auto status = ok("status");
  CHECK(has(status, "ALERT        important expert_imbalance"));
  CHECK_FALSE(has(status, " loss:"));
  CHECK(has(ok("events"), "alert  important expert_imbalance"));
  auto firing = ok("metrics tutti_alert_firing");
  CHECK(has(firing, "alert=\"expert_imbalance\""));
  CHECK_FALSE(has(firing, "alert=\"loss\""));

  // Bad input: one line, a suggestion, the right status.
  refused("stauts", 2, "did you mean 'status'?");
  refused("experts x", 2, "experts: LAYER");
  refused("experts 9", 1, "LAYER must be below");
  refused("kill node9/expert_shard/1", 1, "no actor");
  refused("restart node1/nothing/1", 1, "no actor");
  refused("drain 7", 1, "drain: NODE");
  refused("drain 0", 1, "coordinator");
  refused("status; stauts", 2, "stauts");
  refused("resume", 1, "not paused");
  // A live job's store is in use: rollback names what to do instead.
  refused("rollback --to-version 1", 1, "stop it first (stop), then rollback");
  refused("rollback", 2, "missing --to-version");
  {
    auto r = job.shell("kill node1/expert_shard/2");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(has(r.output, "--yes"));
  }
  auto logs = run(tutti_bin() + " logs " + job.config.string()
                    + " --lines 3 --level warn",
                  30);
  INFO(logs.output);
  CHECK(logs.status == 0);

  // drain: node 1 leaves (its daemon exits 0), the job waits for it, a
  // new daemon takes its place and training goes on. (Through the config:
  // a shell connected through node 1 loses its route with node 1.)
  via = job.config.string();
  CHECK(has(ok("drain 1"), "drained"));
  CHECK(job.node1->wait(30) == 0);
  CHECK(has(ok("nodes"), "drained"));
  job.node1 = job.start(1);
  REQUIRE(wait_until(
    [&] {
      return has(job.shell("status", "", via).output, "state        running");
    },
    60));
  CHECK(has(ok("stop"), "stopping"));
  CHECK(job.node0->wait(60) == 0);
  CHECK(job.node1->wait(30) == 0);
}

TEST_CASE("/metrics passes promtool and matches metrics.jsonl", "[metrics]") {
  live_job job("shell_metrics", 53);
  for (int port : {job.metrics_port, job.metrics_port + 1}) {
    scrape_checked_by_promtool(port, job.dir);
  }
  // The expert counts of the scrape's step, against that step's line.
  auto body = scrape_metrics(job.metrics_port);
  std::smatch m;
  REQUIRE(std::regex_search(body, m, std::regex("\ntutti_job_step ([0-9]+)")));
  const int step = std::stoi(m[1]);
  std::map<std::pair<int, int>, long> scraped;
  std::regex sample("tutti_expert_tokens\\{layer=\"([0-9]+)\",expert=\"([0-9]+)"
                    "\"\\} ([0-9]+)");
  for (auto i = std::sregex_iterator(body.begin(), body.end(), sample);
       i != std::sregex_iterator(); ++i)
    scraped[{std::stoi((*i)[1]), std::stoi((*i)[2])}] = std::stol((*i)[3]);
  REQUIRE(scraped.size() == 8); // 2 layers x 4 experts
  REQUIRE(wait_until([&] { return count_lines(job.metrics) >= step; }, 30));
  std::istringstream lines(read_text(job.metrics));
  std::string line;
  nlohmann::json metrics;
  while (std::getline(lines, line)) {
    metrics = nlohmann::json::parse(line, nullptr, false);
    if (metrics.is_object() && metrics.value("step", int64_t{-1}) == step)
      break;
  }
  REQUIRE(metrics.is_object());
  REQUIRE(metrics.value("step", int64_t{-1}) == step);
  const auto counts = metrics.at("expert_counts");
  for (int l = 0; l < 2; ++l)
    for (int e = 0; e < 4; ++e) {
      INFO("layer " << l << " expert " << e);
      CHECK(scraped[{l, e}] == counts.at(l).at(e).get<long>());
    }
  CHECK(has(body, "tutti_alert_firing{alert=\"expert_imbalance\",level="
                  "\"important\"} 1"));
  CHECK_FALSE(has(body, "alert=\"loss\""));
  // Published when the ranks start and on every heartbeat tick.
  CHECK(wait_until(
    [&] {
      return has(scrape_metrics(job.metrics_port + 1),
                 "tutti_daemon_ranks_running{node=\"1\"} 2");
    },
    10));
}

TEST_CASE("the interactive shell in a real terminal", "[shell_tmux]") {
  // tmux is a test dependency (deploy/install-deps.sh): without it this
  // fails rather than pass untested.
  REQUIRE(run("tmux -V", 10).status == 0);
  live_job job("shell_tmux", 55);
  const auto sock = "tutti-test-" + std::to_string(getpid());
  auto tmux = [&](const std::string& args) {
    return run("tmux -L " + sock + " " + args, 10);
  };
  struct server_guard {
    std::function<void()> stop;
    ~server_guard() { stop(); }
  } guard{[&] { tmux("kill-server"); }};
  auto history = job.dir / "history";
  REQUIRE(tmux("new-session -d -x 160 -y 50 -s shell 'TUTTI_SHELL_HISTORY="
               + history.string() + " " + tutti_bin() + " shell --connect "
               + job.node1_address() + "'")
            .status
          == 0);
  auto screen = [&] { return tmux("capture-pane -p -S -200 -t shell").output; };
  auto type = [&](const std::string& keys, const std::string& expect) {
    tmux("send-keys -t shell " + keys);
    bool seen = wait_until([&] { return has(screen(), expect); }, 20);
    INFO(keys << " -> " << screen());
    CHECK(seen);
  };
  // (capture-pane drops trailing blanks: "tutti> " shows as "tutti>")
  REQUIRE(wait_until([&] { return has(screen(), "tutti>"); }, 20));
  type("status Enter", "state        running");
  type("actors Enter", "node1/expert_shard/2");
  type("'experts 0' Enter", "layer 0");
  // Tab completes a partial command.
  type("nod Tab", "tutti> nodes");
  type("Enter", "heartbeat");
  // kill asks first; the actor comes back with one restart.
  type("'kill node1/expert_shard/2' Enter", "[y/N]");
  type("y Enter", "killed node1/expert_shard/2");
  type("'actors node1/expert_shard/2' Enter", "expert_shard/2");
  REQUIRE(wait_until(
    [&] {
      tmux("send-keys -t shell 'actors node1/expert_shard/2' Enter");
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return std::regex_search(screen(),
                               std::regex("expert_shard/2 +expert_shard +"
                                          "running +1 "));
    },
    20));
  type("pause Enter", "pausing");
  type("status Enter", "state        paused");
  type("resume Enter", "resuming");
  type("stauts Enter", "did you mean 'status'?");
  type("quit Enter", "");
  // History survives the session (libedit's file encodes blanks as \040).
  CHECK(has(read_text(history), "experts\\0400"));
  tmux("kill-session -t shell");
  // The shell's exit ended the server's last session: a new session may
  // meet that server on its way out, so it is asked again until one starts.
  REQUIRE(wait_until(
    [&] {
      return tmux("new-session -d -x 160 -y 50 -s again 'TUTTI_SHELL_HISTORY="
                  + history.string() + " " + tutti_bin() + " shell --connect "
                  + job.node1_address() + "'")
               .status
             == 0;
    },
    10));
  auto again = [&] { return tmux("capture-pane -p -t again").output; };
  REQUIRE(wait_until([&] { return has(again(), "tutti>"); }, 20));
  tmux("send-keys -t again Up Up");
  bool recalled = wait_until([&] { return has(again(), "tutti> stauts"); }, 10);
  INFO(again());
  CHECK(recalled);
}
