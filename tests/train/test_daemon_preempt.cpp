// Preemption as Slurm and Kubernetes do it: SIGTERM to every daemon of a
// 2-daemon job. Within --stop-grace-s the job stops at the next
// step boundary with its checkpoint committed and both daemons exit 3
// (--stopped-status 3: run me again); the same command started again ends
// with the losses of the job run through without a stop, bit for bit. The
// daemons start as Slurm starts them, through deploy/slurm/tutti-node.sh
// (the allocation's hosts written into the config). With a grace time too
// short for the checkpoint (the writer's test hook holds each shard back)
// both exit 3, and the next start resumes from the checkpoint before,
// says so, and still ends with the same bits.

#include <catch2/catch.hpp>

#include <csignal>

#include "daemon_support.hpp"
#include "test_support.hpp"
#include "tutti/store/job_store.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

constexpr int steps = 120;
const std::vector<std::string> requeue_args = {"--stopped-status", "3"};
const std::vector<std::string> short_grace_args = {"--stopped-status", "3",
                                                   "--stop-grace-s", "0.5"};

// The newest checkpoint the job's store records as committed (0: none).
// The store is read only once a MANIFEST shows a commit under way (before,
// its column families may not exist yet).
int committed_step(const fs::path& run_dir) {
  bool manifest = false;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir / "checkpoints", ec))
    manifest = manifest || fs::exists(e.path() / "MANIFEST");
  if (!manifest)
    return 0;
  auto db = tutti::store::job_store::open_read_only(run_dir / "state");
  if (!db.ok())
    return 0;
  auto all = db.value()->checkpoints();
  return all.ok() && !all.value().empty()
           ? static_cast<int>(all.value().back().step)
           : 0;
}

// The job run through without a stop (once per process: every case
// compares with it; synth_data makes the same data in every scratch).
const std::vector<double>& uninterrupted(const fs::path& dir,
                                         const fs::path& data, int port) {
  static const std::vector<double> series = [&] {
    auto config = dir / "whole.yaml";
    write_text(config, daemon_config(data.string(), (dir / "whole").string(),
                                     port, steps));
    run_two_daemons(config, dir);
    return training_series(dir / "whole" / "metrics.jsonl");
  }();
  return series;
}

struct preempted_job {
  fs::path dir, data, run, config, metrics;
  int port;

  preempted_job(const std::string& name, int salt, const std::string& extra) {
    auto scratch = scratch_with_data(name);
    dir = scratch.dir;
    data = scratch.data;
    run = dir / "run";
    config = dir / "job.yaml";
    metrics = run / "metrics.jsonl";
    port = port_block(salt);
    write_text(config,
               daemon_config(data.string(), run.string(), port, steps) + extra);
  }

  // SIGTERM to both daemons; their exit statuses, node 0's first, and the
  // seconds until both had exited.
  std::tuple<int, int, double> preempt(
    std::unique_ptr<tutti::child_process>& n0,
    std::unique_ptr<tutti::child_process>& n1) {
    const auto t0 = std::chrono::steady_clock::now();
    n0->signal(SIGTERM);
    n1->signal(SIGTERM);
    const int s0 = n0->wait(60), s1 = n1->wait(60);
    const auto took = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
    return {s0, s1, took};
  }

  // Node `rank` as srun starts it on host 127.0.0.1 of the allocation.
  std::unique_ptr<tutti::child_process> slurm_node(int rank,
                                                   const fs::path& log) {
    return std::make_unique<tutti::child_process>(
      std::vector<std::string>{
        "env", "SLURM_NODEID=" + std::to_string(rank), "SLURM_JOB_ID=1",
        "TUTTI_CONFIG=" + config.string(), "TUTTI_HOSTS=127.0.0.1 127.0.0.1",
        "TUTTI_RACKS=r0 r1", "TUTTI_PORT=" + std::to_string(port),
        "TUTTI_STOP_GRACE_S=30", "TUTTI_TUTTID=" + tuttid_bin(),
        "TMPDIR=" + dir.string(), "bash",
        source_dir() + "/deploy/slurm/tutti-node.sh"},
      log);
  }

  // The same command again, to the job's end; node 0's log.
  std::string start_again(bool through_slurm) {
    auto node0 = through_slurm ? slurm_node(0, dir / "again0.log")
                               : start_daemon(config, 0, dir / "again0.log", {},
                                              requeue_args);
    auto node1 = through_slurm ? slurm_node(1, dir / "again1.log")
                               : start_daemon(config, 1, dir / "again1.log", {},
                                              requeue_args);
    const int s0 = node0->wait(300), s1 = node1->wait(60);
    auto log0 = read_text(dir / "again0.log");
    INFO("node0: " << tail(log0)
                   << "\nnode1: " << tail(read_text(dir / "again1.log")));
    CHECK(s0 == 0);
    CHECK(s1 == 0);
    return log0;
  }
};

} // namespace

TEST_CASE("preempted within the grace time, the job resumes bit-exactly",
          "[preempt]") {
  preempted_job job("daemon_preempt", 93, "");
  const auto& whole = uninterrupted(job.dir, job.data, job.port);
  int stopped_at = 0;
  {
    auto node0 = job.slurm_node(0, job.dir / "first0.log");
    auto node1 = job.slurm_node(1, job.dir / "first1.log");
    REQUIRE(wait_until([&] { return count_lines(job.metrics) >= 20; }, 120));
    const auto [s0, s1, took] = job.preempt(node0, node1);
    INFO("node0: " << tail(read_text(job.dir / "first0.log")));
    CHECK(s0 == 3); // --stopped-status: run me again
    CHECK(s1 == 3);
    CHECK(took < 30);
    stopped_at = count_lines(job.metrics);
    INFO("stopped after step " << stopped_at << ", " << took << " s");
    REQUIRE(stopped_at < steps);
    CHECK(committed_step(job.run) == stopped_at);
  }
  const auto log0 = job.start_again(true);
  CHECK(has(log0, "resuming after step " + std::to_string(stopped_at)));
  CHECK(training_series(job.metrics) == whole);
}

TEST_CASE("a grace time too short: the checkpoint before, and it says so",
          "[preempt]") {
  preempted_job job("daemon_preempt_short", 97,
                    "checkpoint:\n  interval_steps: 10\n");
  const auto& whole = uninterrupted(job.dir, job.data, job.port);
  int committed = 0;
  {
    // Slow storage: each shard's write takes 1.5 s, three times the grace.
    const std::vector<std::string> slow = {"env",
                                           "TUTTI_CKPT_WRITE_DELAY_MS=1500"};
    auto node0 = start_daemon(job.config, 0, job.dir / "first0.log", slow,
                              short_grace_args);
    auto node1 = start_daemon(job.config, 1, job.dir / "first1.log", slow,
                              short_grace_args);
    REQUIRE(wait_until([&] { return committed_step(job.run) >= 10; }, 120));
    const auto [s0, s1, took] = job.preempt(node0, node1);
    const auto log0 = read_text(job.dir / "first0.log");
    INFO("node0: " << tail(log0));
    CHECK(s0 == 3);
    CHECK(s1 == 3);
    CHECK(took < 10);
    CHECK(has(log0, "the grace time (0.5 s, --stop-grace-s) ran out before "
                    "the stop's checkpoint was committed"));
    committed = committed_step(job.run);
  }
  INFO("the last committed checkpoint: step " << committed);
  const auto log0 = job.start_again(false);
  CHECK(has(log0, "resuming after step " + std::to_string(committed)
                    + ", the last committed checkpoint: the previous run "
                      "stopped at step "));
  CHECK(has(log0, "without its checkpoint (its grace time ran out)"));
  CHECK(training_series(job.metrics) == whole);
}
