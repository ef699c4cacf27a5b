#pragma once
// A 2-daemon job for fault tests: its config (checkpoints every 10 steps,
// fast heartbeats, a 3 s collective timeout), its fault-free reference run
// (`tutti run` of the same config in one process: same ranks, groups and
// data, so the same bits), and the means to hit it.

#include <random>

#include "tutti/store/job_store.hpp"

#include "daemon_support.hpp"
#include "test_support.hpp"

namespace tutti::testing {

// Every loss equal, bit for bit, and none missing.
inline void require_same_losses(const std::vector<double>& reference,
                                const std::vector<double>& actual) {
  REQUIRE(actual.size() == reference.size());
  for (size_t s = 0; s < reference.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(actual[s] == reference[s]);
  }
}

struct fault_job {
  std::filesystem::path dir, data, config, metrics;
  int port = 0, steps = 0;
  std::vector<double> reference_losses; // run_reference()'s

  // `extra`: YAML sections appended to the config. `hosts`: the nodes'
  // addresses (the reference runs on loopback; addresses change no bits).
  fault_job(const std::string& name, int steps_, int salt,
            const std::string& extra = "",
            const std::vector<std::string>& hosts = {"127.0.0.1", "127.0.0.1"})
    : dir(scratch(name)), steps(steps_) {
    data = dir / "data";
    port = port_block(salt);
    config = dir / "job.yaml";
    metrics = dir / "job" / "metrics.jsonl";
    write_text(config, text("job", extra, hosts));
    write_text(dir / "reference.yaml",
               text("reference", extra, {"127.0.0.1", "127.0.0.1"}));
  }

  std::string text(const std::string& run, const std::string& extra,
                   const std::vector<std::string>& hosts) const {
    auto t = daemon_config(data.string(), (dir / run).string(), port, steps,
                           hosts);
    const std::string from = "collective_timeout_ms: 30000";
    t.replace(t.find(from), from.size(), "collective_timeout_ms: 3000");
    return t
           + "checkpoint:\n  interval_steps: 10\n"
             "recovery:\n  heartbeat_interval_ms: 200\n"
             "  heartbeat_timeout_ms: 1000\n  rendezvous_timeout_ms: 10000\n"
             "  max_wait_s: 60\n  straggler_steps: 5\n"
           + extra;
  }

  // Data, and the fault-free losses of the same config in one process.
  std::vector<double> reference() const {
    REQUIRE(synth_data(data));
    auto ref = run(tutti_bin() + " run " + (dir / "reference.yaml").string()
                     + " --quiet --fresh --yes",
                   300);
    INFO(ref.output);
    REQUIRE(ref.status == 0);
    return metric_series(dir / "reference" / "metrics.jsonl", "loss");
  }

  void run_reference() { reference_losses = reference(); }

  std::unique_ptr<child_process> daemon(
    int node, const std::string& log,
    const std::vector<std::string>& prefix = {}) {
    return start_daemon(config, node, dir / log, prefix);
  }

  int steps_done() const { return count_lines(metrics); }
  // The job's losses are the reference run's (run_reference), bit for bit.
  void check_losses() const {
    require_same_losses(reference_losses, metric_series(metrics, "loss"));
  }

  // The job's two daemons, logging to node0.log and node1.log.
  struct daemons {
    std::unique_ptr<child_process> node0, node1;
  };
  daemons start_daemons() {
    return {daemon(0, "node0.log"), daemon(1, "node1.log")};
  }
  // The fault-free run first, for check_losses().
  daemons start_after_reference() {
    run_reference();
    return start_daemons();
  }
  // Both end the job cleanly: node 0 (the coordinator's) within 300 s,
  // node 1 within 60 s after it.
  static void check_finished(daemons& d) {
    CHECK(d.node0->wait(300) == 0);
    CHECK(d.node1->wait(60) == 0);
  }
  std::string node_logs() const {
    return read_text(dir / "node0.log") + read_text(dir / "node1.log");
  }

  void wait_for_step(int step) const {
    REQUIRE(wait_until([&] { return steps_done() >= step; }, 120));
  }
  // Waits for a step drawn from [lo, hi] (random_step) and returns it.
  int wait_for_random_step(int lo, int hi) const {
    const int step = random_step(lo, hi);
    wait_for_step(step);
    return step;
  }

  // Node 0's event log (once its daemon has exited: the store is locked
  // while it runs).
  std::vector<store::event> events() const {
    auto db = store::job_store::open(dir / "job" / "state");
    REQUIRE(db.ok());
    auto all = db.value()->events();
    REQUIRE(all.ok());
    return all.value();
  }

  static size_t count(const std::vector<store::event>& events,
                      const std::string& kind) {
    size_t n = 0;
    for (const auto& e : events)
      n += e.kind == kind;
    return n;
  }

  // Replaces `from` by `to` in the job's config.
  void edit_config(const std::string& from, const std::string& to) const {
    auto t = read_text(config);
    t.replace(t.find(from), from.size(), to);
    write_text(config, t);
  }

  // A step in [lo, hi], drawn afresh each run (printed for reproduction).
  static int random_step(int lo, int hi) {
    std::random_device rd;
    int s = std::uniform_int_distribution<int>(lo, hi)(rd);
    WARN("fault injected after step " << s);
    return s;
  }

  command_result chaos(const std::string& args) const {
    return run(tutti_bin() + " chaos " + config.string() + " " + args, 60);
  }
  // `tutti chaos ARGS`, which must be accepted.
  void inject(const std::string& args) const {
    auto c = chaos(args);
    INFO(args << ": " << c.output);
    REQUIRE(c.status == 0);
  }

  // Seconds until `text` appears in `log`, or -1 past `seconds`.
  double seconds_until(const std::string& log, const std::string& text,
                       double seconds) const {
    auto t0 = std::chrono::steady_clock::now();
    if (!wait_until(
          [&] { return read_text(dir / log).find(text) != std::string::npos; },
          seconds))
      return -1;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
  }
};

// How many events of each kind the job's event log must hold.
inline void check_event_counts(
  const std::vector<store::event>& events,
  std::initializer_list<std::pair<const char*, size_t>> expected) {
  for (auto [kind, n] : expected) {
    INFO("event kind " << kind);
    CHECK(fault_job::count(events, kind) == n);
  }
}

// The fault job's configs (its own and the reference's) on two daemons
// with `parallel_key: 2` (tensor_ or pipeline_model_parallel_size) and
// `train_lines` added: world 4 spreads the experts over the two
// data-parallel ranks of each TP index or stage; world 2 runs one rank per
// daemon.
inline void make_model_parallel(const fault_job& job, int world,
                                const std::string& parallel_key,
                                const std::string& train_lines = "") {
  for (const auto& file : {job.config, job.dir / "reference.yaml"}) {
    auto text = read_text(file);
    auto set = [&](const std::string& from, const std::string& to) {
      const auto at = text.find(from);
      REQUIRE(at != std::string::npos);
      text.replace(at, from.size(), to);
    };
    set("  ep_size: 4\n", "  ep_size: " + std::to_string(world / 2) + "\n  "
                            + parallel_key + ": 2\n");
    set("  log_interval: 10\n", "  log_interval: 10\n" + train_lines);
    if (world == 2) {
      set("  world_size: 4\n", "  world_size: 2\n");
      set("  nproc_per_node: 2\n", "  nproc_per_node: 1\n");
    }
    write_text(file, text);
  }
}

// Node 1's daemon killed with SIGKILL at a random step (its ranks die
// mid-step, their partners on node 0 block in a collective) and started
// again: the job recovers from its checkpoint with the fault-free losses.
inline void check_node1_kill_recovers(fault_job& job) {
  auto nodes = job.start_after_reference();
  job.wait_for_random_step(12, 35);
  nodes.node1->kill_and_reap();
  CHECK(job.seconds_until("node0.log", "job interrupted", 10) >= 0);
  nodes.node1 = job.daemon(1, "node1-again.log");
  fault_job::check_finished(nodes);
  auto log = job.node_logs() + read_text(job.dir / "node1-again.log");
  INFO(log);
  CHECK(log.find("recovered: epoch 1 starts from the checkpoint of step")
        != std::string::npos);
  job.check_losses();
  check_event_counts(job.events(),
                     {{"node_lost", 1}, {"recovery", 1}, {"resumed", 1}});
}

// Rank 1 crashed by chaos kill_rank at a random step: the job recovers
// from its checkpoint with the fault-free losses.
inline void check_rank1_kill_recovers(fault_job& job) {
  auto nodes = job.start_after_reference();
  job.wait_for_random_step(12, 35);
  job.inject("kill_rank --rank 1");
  fault_job::check_finished(nodes);
  auto log = job.node_logs();
  INFO(log);
  CHECK(log.find("recovered: epoch 1") != std::string::npos);
  job.check_losses();
}

} // namespace tutti::testing
