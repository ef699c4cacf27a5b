// Elastic training through a lost daemon: four daemons of one rank, no
// spare, each rank's state copied to the next node's memory every step
// (elastic.replica_interval_steps: 1), node 3 killed with SIGKILL at a
// random step. Past elastic.shrink_after_s the three survivors write the
// newest step's copies as a checkpoint and train on from it (world 3, the
// global batch unchanged), so no step is trained again; when node 3's
// daemon is started again the ranks checkpoint and pause at the next step
// and the job regroups on four from it. The whole loss curve is the
// fault-free run's within the world-size tolerance (1e-4 relative), and
// every checkpoint verifies. The copies travel on their own thread while
// the next step trains; a step is reported once its copies have landed.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <thread>

#include <nlohmann/json.hpp>

#include "fault_support.hpp"

using namespace tutti::testing;

namespace {

struct four_daemons {
  std::vector<std::unique_ptr<child_process>> nodes;
};

// The fault job on 4 daemons with 12 sequences a step and 12 held out
// (they split over 4 and 3 data-parallel ranks) and `elastic` lines added.
fault_job elastic_job(const std::string& name, int steps, int salt,
                      const std::string& elastic) {
  fault_job job(name, steps, salt, elastic,
                {"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1"});
  for (const auto& file : {job.config, job.dir / "reference.yaml"}) {
    auto text = read_text(file);
    for (const auto& [from, to] :
         {std::pair{"global_batch_size: 8", "global_batch_size: 12"},
          std::pair{"eval_sequences: 8", "eval_sequences: 12"}}) {
      const auto at = text.find(from);
      REQUIRE(at != std::string::npos);
      text.replace(at, std::string(from).size(), to);
    }
    write_text(file, text);
  }
  return job;
}

void check_close_losses(const std::vector<double>& reference,
                        const std::vector<double>& actual) {
  REQUIRE(actual.size() == reference.size());
  double worst = 0;
  for (size_t s = 0; s < reference.size(); ++s) {
    const double rel = std::abs(actual[s] - reference[s])
                       / std::abs(reference[s]);
    worst = std::max(worst, rel);
    INFO("step " << s + 1 << ": " << actual[s] << " vs " << reference[s]);
    CHECK(rel <= 1e-4);
  }
  WARN("largest relative loss difference from the fault-free run: " << worst);
}

// `tutti ckpt verify` passes on every committed checkpoint the job kept
// (one an aborted epoch's ranks were writing has shards and no MANIFEST:
// never committed, nothing resumes from it).
void check_checkpoints_verify(const fault_job& job) {
  int verified = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(job.dir / "job" / "checkpoints")) {
    if (entry.path().filename().string().rfind("step-", 0) != 0
        || !std::filesystem::exists(entry.path() / "MANIFEST"))
      continue;
    auto verify = run(tutti_bin() + " ckpt verify " + entry.path().string(),
                      120);
    INFO(entry.path() << ": " << verify.output);
    CHECK(verify.status == 0);
    ++verified;
  }
  CHECK(verified > 0);
}

// `tutti plan`'s bytes per rank for `config`.
double planned_bytes_per_rank(const std::filesystem::path& config) {
  auto plan = run(tutti_bin() + " plan " + config.string() + " --json", 30);
  INFO(plan.output);
  REQUIRE(plan.status == 0);
  return nlohmann::json::parse(plan.output)["memory"]["total_all_stages"]
    .get<double>();
}

} // namespace

TEST_CASE("a lost daemon without a spare: three go on, four again on return",
          "[elastic_shrink_grow]") {
  auto job = elastic_job("fault_elastic", 80, 91,
                         "elastic:\n  min_nodes: 2\n  shrink_after_s: 1\n"
                         "  replica_interval_steps: 1\n");
  job.run_reference();
  four_daemons d;
  for (int n = 0; n < 4; ++n)
    d.nodes.push_back(job.daemon(n, "node" + std::to_string(n) + ".log"));
  const int killed_after = job.wait_for_random_step(12, 25);
  d.nodes[3]->kill_and_reap(); // kill -9, no spare anywhere
  const double shrunk =
    job.seconds_until("node0.log", "going on without node 3", 20);
  INFO(read_text(job.dir / "node0.log"));
  REQUIRE(shrunk >= 0);
  // Bound: the heartbeat timeout (1 s), shrink_after_s (1 s), the aborts.
  CHECK(shrunk <= 6);
  const auto log = read_text(job.dir / "node0.log");
  CHECK(log.find("world 3 on nodes 0, 1, 2") != std::string::npos);
  // Resumed from the copies of the last step done: nothing trained again.
  CHECK(log.find("recovered: epoch 1 starts from the checkpoint of step")
        != std::string::npos);
  CHECK(log.find("0 steps to train again; world 3") != std::string::npos);
  // Trains on three past where it was killed, and says so.
  job.wait_for_step(killed_after + 3);
  auto status = run(tutti_bin() + " status " + job.config.string() + " --json",
                    30);
  INFO(status.output);
  CHECK(status.output.find("training without lost nodes") != std::string::npos);
  d.nodes[3] = job.daemon(3, "node3-again.log");
  CHECK(job.seconds_until("node0.log", "taking back returned nodes", 30) >= 0);
  CHECK(d.nodes[0]->wait(300) == 0);
  for (int n = 1; n < 4; ++n)
    CHECK(d.nodes[n]->wait(60) == 0);
  check_close_losses(job.reference_losses,
                     metric_series(job.metrics, "loss"));
  // A copied step is reported once its copies have landed: no lag at
  // K = 1; each copy timed and sized.
  const auto lag = metric_series(job.metrics, "replica_lag_steps");
  CHECK(lag.size() == job.reference_losses.size());
  CHECK(std::count(lag.begin(), lag.end(), 0.0)
        == static_cast<std::ptrdiff_t>(lag.size()));
  for (const auto& key : {"time_replica_copy_s", "replica_bytes"}) {
    const auto series = metric_series(job.metrics, key);
    CHECK(std::count_if(series.begin(), series.end(),
                        [](double v) { return v > 0; })
          == static_cast<std::ptrdiff_t>(series.size()));
  }
  const auto events = job.events();
  CHECK(fault_job::count(events, "node_lost") == 1);
  CHECK(fault_job::count(events, "shrink") == 1);
  CHECK(fault_job::count(events, "grow") >= 1);
  // From the copies; or, killed right after a checkpoint's step, from that
  // checkpoint (the copies hold nothing newer, and the fallback says so):
  // 0 steps either way.
  const auto fallbacks = fault_job::count(events, "replica_fallback");
  CHECK(fault_job::count(events, "replica_resume") + fallbacks == 1);
  if (fallbacks > 0)
    CHECK(log.find("no copy newer than the checkpoint") != std::string::npos);
  // Every checkpoint kept, those written by three ranks too, verifies.
  check_checkpoints_verify(job);
}

namespace {

// Two racks of two daemons; nodes 2 and 3 (one rack) killed together.
// `racks`: the four nodes' rack labels.
void lose_a_rack(const std::string& name, int salt,
                 const std::vector<std::string>& racks, bool copies_survive) {
  auto job = elastic_job(name, 60, salt,
                         "elastic:\n  min_nodes: 2\n  shrink_after_s: 1\n"
                         "  replica_interval_steps: 1\n");
  auto text = read_text(job.config);
  for (int n = 0; n < 4; ++n) {
    const auto from = "rack: r" + std::to_string(n) + "}";
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), "rack: " + racks[n] + "}");
  }
  write_text(job.config, text);
  job.run_reference();
  four_daemons d;
  for (int n = 0; n < 4; ++n)
    d.nodes.push_back(job.daemon(n, "node" + std::to_string(n) + ".log"));
  // Clear of the checkpoint of step 20: there the copies would hold
  // nothing newer than it, and the fallback would have nothing to say.
  job.wait_for_random_step(13, 16);
  d.nodes[2]->kill_and_reap();
  d.nodes[3]->kill_and_reap();
  CHECK(job.seconds_until("node0.log", "going on without", 20) >= 0);
  CHECK(d.nodes[0]->wait(300) == 0);
  CHECK(d.nodes[1]->wait(60) == 0);
  const auto log = read_text(job.dir / "node0.log");
  INFO(log);
  CHECK(log.find("world 2 on nodes 0, 1") != std::string::npos);
  check_close_losses(job.reference_losses,
                     metric_series(job.metrics, "loss"));
  const auto events = job.events();
  if (copies_survive) {
    CHECK(log.find("0 steps to train again") != std::string::npos);
    CHECK(fault_job::count(events, "replica_resume") == 1);
    CHECK(fault_job::count(events, "replica_fallback") == 0);
  } else {
    // Node 2's copy was on node 3: the checkpoint, and the reason.
    CHECK(log.find("not from in-memory copies: the copies of step")
          != std::string::npos);
    CHECK(log.find("of ranks 2 were only on lost nodes") != std::string::npos);
    CHECK(fault_job::count(events, "replica_resume") == 0);
    CHECK(fault_job::count(events, "replica_fallback") == 1);
  }
}

} // namespace

TEST_CASE("a whole rack lost: its copies in the other rack carry the job on",
          "[elastic_rack_loss]") {
  // Copies go two nodes on (to the other rack): nodes 0 and 1 hold them.
  lose_a_rack("fault_elastic_racks", 93, {"a", "a", "b", "b"}, true);
  // One rack for all: copies go to the next node, node 2's to node 3.
  lose_a_rack("fault_elastic_one_rack", 95, {"a", "a", "a", "a"}, false);
}

TEST_CASE("survivors whose devices cannot hold the smaller layout: the job "
          "pauses, says why, and goes on when the node is back",
          "[elastic_pause]") {
  auto job = elastic_job("fault_elastic_pause", 60, 97,
                         "elastic:\n  min_nodes: 2\n  shrink_after_s: 1\n"
                         "  replica_interval_steps: 1\n");
  // On three nodes ep_size drops from 4 to 1: every rank holds all four
  // experts. The devices' memory lies between the two layouts' plans.
  auto text = read_text(job.config);
  const auto node3 = "    - {host: 127.0.0.1, port: "
                     + std::to_string(job.port + 4) + ", rack: r3}\n";
  auto three = text;
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"world_size: 4", "world_size: 3"},
        {"nnodes: 4", "nnodes: 3"},
        {"ep_size: 4", "ep_size: 1"},
        {node3, ""}})
    three = replace_once(three, from, to);
  write_text(job.dir / "three.yaml", three);
  const double four_nodes = planned_bytes_per_rank(job.config);
  const double three_nodes = planned_bytes_per_rank(job.dir / "three.yaml");
  REQUIRE(three_nodes > 1.02 * four_nodes);
  write_text(job.config,
             replace_once(text, "cluster_config:\n",
                          "cluster_config:\n  device_memory_gb: "
                            + std::to_string((four_nodes + three_nodes) / 2e9)
                            + "\n"));
  job.run_reference();
  four_daemons d;
  for (int n = 0; n < 4; ++n)
    d.nodes.push_back(job.daemon(n, "node" + std::to_string(n) + ".log"));
  const int killed_after = job.wait_for_random_step(12, 25);
  d.nodes[3]->kill_and_reap();
  CHECK(job.seconds_until("node0.log", "job paused", 20) >= 0);
  auto status = run(tutti_bin() + " status " + job.config.string() + " --json",
                    30);
  INFO(status.output);
  CHECK(status.output.find("cluster_config.device_memory_gb")
        != std::string::npos);
  // Nothing trains meanwhile.
  const auto at_pause = metric_series(job.metrics, "loss").size();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  CHECK(metric_series(job.metrics, "loss").size() == at_pause);
  CHECK(at_pause >= static_cast<size_t>(killed_after));
  d.nodes[3] = job.daemon(3, "node3-again.log");
  CHECK(d.nodes[0]->wait(300) == 0);
  for (int n = 1; n < 4; ++n)
    CHECK(d.nodes[n]->wait(60) == 0);
  const auto log = read_text(job.dir / "node0.log");
  INFO(log);
  CHECK(log.find("world 3 needs") != std::string::npos);
  CHECK(log.find("0 steps to train again") != std::string::npos);
  check_close_losses(job.reference_losses,
                     metric_series(job.metrics, "loss"));
  const auto events = job.events();
  CHECK(fault_job::count(events, "pause") == 1);
  CHECK(fault_job::count(events, "shrink") == 0);
  check_checkpoints_verify(job);
}
