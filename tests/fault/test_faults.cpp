// Fault tests (label fault): each injects real faults into a live 2-daemon
// job and checks that it recovers by itself, with the losses of the
// fault-free run bit for bit. One CTest entry per test case.

#include <catch2/catch.hpp>

#include <csignal>
#include <map>
#include <regex>
#include <sstream>

#include "fault_support.hpp"

using namespace tutti::testing;

namespace {
// Two experts per rank (EP groups of 2, expert-data-parallel pairs). Over
// Gloo (`tcp`) the layer's combine goes in two chunks, and raise_expert
// fails the second while the rank is sending the first
// (shard_executor::forward_chunks). Through memory (the default for a
// daemon's own ranks) the exchanges go by runs in one chunk.
void expert_restarts(const std::string& name, const std::string& transport) {
  fault_job job(name, 120, 81);
  for (const auto& file : {job.config, job.dir / "reference.yaml"}) {
    write_text(file,
               replace_line(read_text(file), "  ep_size: 4",
                            "  ep_size: 2\n  local_transport: " + transport));
  }
  auto nodes = job.start_after_reference();
  int at = fault_job::random_step(5, 30);
  for (auto [fault, rank] :
       {std::pair{"kill_expert", 1}, std::pair{"raise_expert", 2},
        std::pair{"nan_expert", 3}}) {
    job.wait_for_step(at);
    job.inject(std::string(fault) + " --rank " + std::to_string(rank));
    at += 25;
  }
  fault_job::check_finished(nodes);
  auto log = job.node_logs();
  INFO(log);
  // Three restarts in place, no job-level recovery.
  size_t restarts = 0;
  for (auto at = log.find("restarted in place"); at != std::string::npos;
       at = log.find("restarted in place", at + 1))
    ++restarts;
  CHECK(restarts == 3);
  CHECK(log.find("non-finite value in the expert output") != std::string::npos);
  CHECK(log.find("injected fault (raise_expert)") != std::string::npos);
  // In chunks the chunk in flight failed: the chunk before it was replayed
  // (in one chunk there may be none before it).
  CHECK(std::regex_search(
    log, std::regex(std::string("rank 2: expert shard restarted in place at "
                                "step [0-9]+, ")
                    + (transport == "tcp" ? "[1-9][0-9]*" : "[0-9]+")
                    + " expert calls replayed")));
  CHECK(log.find("recovered: epoch") == std::string::npos);
  job.check_losses();
  // Each restart is an event, and so is the rank's replay of the step with
  // how long it stalled the rank.
  check_event_counts(
    job.events(),
    {{"restart", 3}, {"replayed", 3}, {"chaos", 3}, {"recovery", 0}});
}
} // namespace

TEST_CASE("expert shards killed, raising and producing NaN restart in place",
          "[expert_restart]") {
  expert_restarts("fault_expert_restart", "tcp");
}

TEST_CASE("the same restarts in place where a daemon's ranks exchange "
          "through memory",
          "[expert_restart_memory]") {
  expert_restarts("fault_expert_restart_memory", "memory");
}

TEST_CASE("past the restart intensity the job recovers from its checkpoint",
          "[escalation]") {
  fault_job job("fault_escalation", 80, 83,
                "supervision:\n  expert_shard:\n    max_restarts: 0\n");
  auto nodes = job.start_after_reference();
  job.wait_for_random_step(12, 50);
  job.inject("kill_expert --rank 2");
  fault_job::check_finished(nodes);
  auto log = job.node_logs();
  INFO(log);
  CHECK(log.find("expert_shards/0 gives up: more than 0 restarts")
        != std::string::npos);
  CHECK(log.find("escalated") != std::string::npos);
  CHECK(log.find("recovered: epoch 1 starts from the checkpoint of step")
        != std::string::npos);
  job.check_losses();
  auto events = job.events();
  check_event_counts(
    events,
    {{"escalation", 1}, {"failure", 1}, {"recovery", 1}, {"resumed", 1}});
  for (const auto& e : events)
    if (e.kind == "recovery" || e.kind == "resumed")
      CHECK(e.duration_s > 0);
}

TEST_CASE("a killed daemon is detected, rejoins and training resumes",
          "[node_loss]") {
  fault_job job("fault_node_loss", 100, 85);
  // Past max_wait_s the job is paused, not failed, until the node returns
  // (job.yaml only: the reference run has its own config).
  job.edit_config("max_wait_s: 60", "max_wait_s: 1");
  auto nodes = job.start_after_reference();
  job.wait_for_random_step(12, 60);
  nodes.node1->kill_and_reap(); // kill -9
  // Within the heartbeat timeout (1 s; the closed connection is faster).
  double detect = job.seconds_until("node0.log", "job interrupted", 5);
  INFO("detected after " << detect << " s");
  CHECK(detect >= 0);
  CHECK(detect <= 1.0 + 0.2);
  CHECK(job.seconds_until("node0.log", "node 1 (127.0.0.1:", 5) >= 0);
  CHECK(job.seconds_until("node0.log", "job paused: waiting for node 1", 5)
        >= 0);
  auto status = run(tutti_bin() + " status " + job.config.string() + " --json",
                    30);
  INFO(status.output);
  CHECK(status.status == 0);
  CHECK(status.output.find("\"state\":\"paused\"") != std::string::npos);
  nodes.node1 = job.daemon(1, "node1-again.log");
  double back = job.seconds_until("job/tuttid-0.log.jsonl", "training resumed",
                                  30);
  INFO("training again " << back << " s after the daemon's return");
  CHECK(back >= 0);
  CHECK(back <= 15);
  fault_job::check_finished(nodes);
  job.check_losses();
  check_event_counts(job.events(), {{"node_lost", 1},
                                    {"failure", 1},
                                    {"pause", 1},
                                    {"node_joined", 1},
                                    {"recovery", 1},
                                    {"resumed", 1}});
}

TEST_CASE("a rank hung in a collective is detected and recovered",
          "[rank_hang]") {
  fault_job job("fault_rank_hang", 80, 87);
  auto nodes = job.start_after_reference();
  job.wait_for_random_step(12, 50);
  job.inject("hang_rank --rank 3");
  // Detected at the collective timeout (3 s) and recovered with aborted
  // communicators: far inside Gloo's own default timeout (30 s).
  double recovered = job.seconds_until("node0.log", "recovered: epoch 1", 20);
  INFO("recovered after " << recovered << " s");
  CHECK(recovered >= 0);
  CHECK(recovered < 10);
  fault_job::check_finished(nodes);
  job.check_losses();
}

TEST_CASE("a restarted coordinator daemon resumes the job by itself",
          "[coordinator_restart]") {
  fault_job job("fault_coordinator_restart", 100, 89);
  auto nodes = job.start_after_reference();
  job.wait_for_random_step(15, 60);
  nodes.node0->kill_and_reap();
  nodes.node0 = job.daemon(0, "node0-again.log");
  fault_job::check_finished(nodes);
  auto log = read_text(job.dir / "node0-again.log");
  INFO(log << read_text(job.dir / "node1.log"));
  CHECK(log.find("resuming after step") != std::string::npos);
  job.check_losses();
}

TEST_CASE("tutti drill reports detection, recovery and the loss curve",
          "[drill]") {
  fault_job job("fault_drill", 120, 91);
  REQUIRE(synth_data(job.data));
  write_text(job.dir / "drill.yaml",
             "config: job.yaml\nstep_timeout_s: 60\nfaults:\n"
             "  - {fault: kill_expert, rank: 1, at_step: 15}\n"
             "  - {fault: hang_rank, rank: 2, at_step: 35}\n"
             "  - {fault: kill_daemon, node: 1, at_step: 60, "
             "restart_after_s: 1, during_checkpoint: true}\n"
             "  - {fault: crash_checkpoint, node: 0, at_step: 85}\n");
  auto r = run(tutti_bin() + " drill " + (job.dir / "drill.yaml").string(),
               400);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("whole loss curve equal to the fault-free run")
        != std::string::npos);
  CHECK(r.output.find("killed while the checkpoint of step")
        != std::string::npos);
  CHECK(r.output.find("effective training time ratio: 0.")
        != std::string::npos);
  // Every checkpoint left behind, the one the kill cut short too, verifies.
  CHECK(r.output.find("every one verified") != std::string::npos);
  CHECK(r.output.find("FAILED") == std::string::npos);
  // One row per fault: fault target at-step detect resume redone matches.
  std::map<std::string, std::vector<double>> rows;
  std::istringstream in(r.output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string fault, kind, target, matched;
    double at = 0, detect = 0, resume = 0, redone = 0;
    if (f >> fault >> kind >> target >> at >> detect >> resume >> redone
          >> matched
        && matched == "matches")
      rows[fault] = {detect, resume, redone};
  }
  REQUIRE(rows.size() == 4);
  // Expert restart: training goes on within one step time + 0.5 s (the
  // drill prints that bound from the reference run's step time).
  auto bound = r.output.find(" + 0.5 s = ");
  REQUIRE(bound != std::string::npos);
  CHECK(rows["kill_expert"][1] <= std::stod(r.output.substr(bound + 11)));
  CHECK(rows["kill_expert"][2] == 0);
  auto back = r.output.find("back to training ");
  REQUIRE(back != std::string::npos);
  CHECK(std::stod(r.output.substr(back + 17)) <= 15);
}

TEST_CASE("loader, writer and rank failures: restarts and a recovery",
          "[helpers]") {
  fault_job job("fault_helpers", 100, 95);
  auto nodes = job.start_after_reference();
  int at = fault_job::random_step(5, 20);
  for (auto args : {"kill_loader --rank 0", "kill_writer --node 1",
                    "crash_checkpoint --node 1", "kill_rank --rank 1"}) {
    job.wait_for_step(at);
    job.inject(args);
    at += 18;
  }
  fault_job::check_finished(nodes);
  auto log = job.node_logs();
  INFO(log);
  CHECK(log.find("restarted data_loader/0") != std::string::npos);
  CHECK(log.find("restarted checkpoint_writer") != std::string::npos);
  CHECK(log.find("writing again") != std::string::npos);
  CHECK(log.find("recovered: epoch 1") != std::string::npos);
  job.check_losses();
  // Every checkpoint of the run was committed, the crashed one included.
  auto db = tutti::store::job_store::open(job.dir / "job" / "state");
  REQUIRE(db.ok());
  auto all = db.value()->checkpoints();
  REQUIRE(all.ok());
  REQUIRE(!all.value().empty());
  CHECK(all.value().back().step == 100);
}

TEST_CASE("a slow rank is named as a straggler", "[straggler]") {
  fault_job job("fault_straggler", 60, 97, "");
  job.edit_config("straggler_steps: 5", "straggler_steps: 3");
  REQUIRE(synth_data(job.data));
  auto nodes = job.start_daemons();
  job.wait_for_step(10);
  job.inject("slow_rank --rank 3 --seconds 0.1");
  double named = job.seconds_until(
    "node0.log", "straggler: rank 3 on node 1 (127.0.0.1:", 60);
  CHECK(named >= 0);
  fault_job::check_finished(nodes);
  // Named once, however long it stays slow. (A loaded host can make
  // another rank look slow for a few steps; that is not this check's.)
  size_t named_rank3 = 0;
  for (const auto& e : job.events())
    if (e.kind == "straggler") {
      named_rank3 += e.detail.find("rank 3 ") != std::string::npos;
      if (e.detail.find("rank 3 ") == std::string::npos)
        WARN("another rank named: " << e.detail);
    }
  CHECK(named_rank3 == 1);
}
