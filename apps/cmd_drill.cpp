// tutti drill DRILL.yaml: runs the drill's job fault-free in this process
// (the reference), then on real daemons (one tuttid per node, on this
// machine) while injecting the drill's faults one by one, and reports for
// each: time to detect it, time until training goes on, steps redone (as
// the coordinator counted them), and whether the loss curve is the
// reference's bit for bit (within 1e-4 where elastic.min_nodes lets the
// job go on in a smaller layout), then the effective training time ratio
// over the drill and a verification of every checkpoint kept. Exit 0 when
// the job completed, every curve matched and every checkpoint verified.

#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "child_process.hpp"
#include "commands.hpp"
#include "command_line.hpp"
#include "drill_plan.hpp"
#include "job_start.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/job_store.hpp"
#include "tutti/train/local_job.hpp"
#include "tutti/client/job_client.hpp"

namespace tutti::cli {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Each complete line of a metrics.jsonl as a JSON object (a line being
// written, or a damaged one, is skipped).
template <class F>
void for_each_record(const fs::path& metrics, F&& use) {
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_object())
      use(record);
  }
}

// step -> the loss exactly as written (doubles round-trip, so equal text
// is an equal value bit for bit; a NaN loss is null on both sides).
std::map<int64_t, std::string> losses(const fs::path& metrics) {
  std::map<int64_t, std::string> out;
  for_each_record(metrics, [&](const nlohmann::json& r) {
    auto step = r.find("step"), loss = r.find("loss");
    if (step != r.end() && step->is_number_integer() && loss != r.end())
      out[step->get<int64_t>()] = loss->dump();
  });
  return out;
}

double median_step_time(const fs::path& metrics) {
  std::vector<double> times;
  for_each_record(metrics, [&](const nlohmann::json& r) {
    auto t = r.find("step_time_s");
    if (t != r.end() && t->is_number())
      times.push_back(t->get<double>());
  });
  if (times.empty())
    return 0;
  std::nth_element(times.begin(), times.begin() + times.size() / 2,
                   times.end());
  return times[times.size() / 2];
}

// The time of the steps the job kept: each step's last record (a step
// trained again counts once).
double kept_steps_seconds(const fs::path& metrics) {
  std::map<int64_t, double> times;
  for_each_record(metrics, [&](const nlohmann::json& r) {
    auto step = r.find("step"), t = r.find("step_time_s");
    if (step != r.end() && step->is_number_integer() && t != r.end()
        && t->is_number())
      times[step->get<int64_t>()] = t->get<double>();
  });
  double sum = 0;
  for (const auto& [step, t] : times)
    sum += t;
  return sum;
}

std::string node_list(const std::vector<int64_t>& nodes) {
  std::string out = nodes.size() > 1 ? "nodes " : "node ";
  for (size_t i = 0; i < nodes.size(); ++i)
    out += (i ? "," : "") + std::to_string(nodes[i]);
  return out;
}

// Polls the coordinator's status, reconnecting when it went away.
class status_probe {
public:
  explicit status_probe(std::string address) : address_(std::move(address)) {}

  std::optional<job_status> poll() {
    if (!job_.connected() && !job_.connect(address_))
      return std::nullopt;
    auto s = job_.get_status(std::chrono::seconds(2));
    if (!s) {
      job_.disconnect();
      return std::nullopt;
    }
    return std::move(*s);
  }

  expected<std::string> chaos(const chaos_request& req) {
    if (!job_.connected())
      return status::error("not connected");
    return job_.chaos(req, std::chrono::seconds(10));
  }

private:
  client::job_client job_;
  std::string address_;
};

struct fault_result {
  drill_fault fault;
  int64_t injected_at = 0;         // last step done when injected
  double detect_s = NAN;           // injection -> the coordinator knew
  double resume_s = NAN;           // injection -> a new step done
  double back_to_training_s = NAN; // kill_daemon: relaunch -> a new step
  int64_t resumed_from = -1;       // job level: the checkpoint step
  int64_t redone = 0;
  bool matched = false;
  std::string note;
};

class drill {
public:
  explicit drill(drill_plan plan) : plan_(std::move(plan)) {
    run_dir_ = fs::absolute(plan_.job.run.dir);
    tuttid_ = fs::read_symlink("/proc/self/exe").parent_path() / "tuttid";
  }

  int run() {
    if (!fs::exists(tuttid_))
      return fail(1, "drill: " + tuttid_.string() + " not found");
    if (!run_reference())
      return 1;
    status_probe probe(plan_.job.cluster.coordinator_host() + ":"
                       + std::to_string(plan_.job.cluster.coordinator_port()));
    for (int64_t n = 0; n < plan_.job.cluster.nnodes; ++n) {
      // A node to be killed mid-checkpoint writes slowly (its first
      // daemon inherits this; the one started after the kill does not).
      bool slow = false;
      for (const auto& f : plan_.faults)
        if (f.during_checkpoint
            && std::count(f.nodes.begin(), f.nodes.end(), n) > 0)
          slow = true;
      if (slow)
        setenv("TUTTI_CKPT_WRITE_DELAY_MS",
               std::to_string(drill_checkpoint_write_ms).c_str(), 1);
      launch(n, n == 0);
      unsetenv("TUTTI_CKPT_WRITE_DELAY_MS");
    }
    std::printf("drill: %lld daemons started; faults follow\n",
                static_cast<long long>(plan_.job.cluster.nnodes));
    std::fflush(stdout);
    for (const auto& f : plan_.faults) {
      fault_result r;
      r.fault = f;
      if (!inject(probe, r))
        return report(false, "the job did not reach step "
                               + std::to_string(f.at_step) + " in time");
      results_.push_back(r);
    }
    const bool completed = finish(probe);
    return report(completed, completed ? "" : "the job did not complete");
  }

private:
  bool run_reference() {
    auto cfg = plan_.job;
    cfg.run.dir = (run_dir_ / "drill-reference").string();
    cfg.checkpoint.dir =
      (run_dir_ / "drill-reference" / "checkpoints").string();
    std::printf("drill: the fault-free reference run (%lld steps)\n",
                static_cast<long long>(cfg.train.steps));
    std::fflush(stdout);
    auto start = open_job(cfg, plan_.config_path,
                          (run_dir_ / "drill-reference" / "state").string(),
                          true, true, "tutti drill");
    if (start.status != 0)
      return false;
    std::atomic<bool> never{false};
    auto result = run_local_job(cfg, true, never, start.db, 0);
    if (!result.ok) {
      fail(1, "drill: the reference run failed: " + result.message);
      // Its ranks may sit in collectives; do not wait for them.
      std::fflush(nullptr);
      std::_Exit(1);
    }
    reference_ = losses(fs::path(cfg.run.dir) / "metrics.jsonl");
    step_time_s_ = median_step_time(fs::path(cfg.run.dir) / "metrics.jsonl");
    return true;
  }

  void launch(int64_t node, bool fresh) {
    std::vector<std::string> argv{
      tuttid_.string(),
      "--config",
      plan_.config_path,
      "--node-rank",
      std::to_string(node),
      "--data-dir",
      (run_dir_ / ("drill-node-" + std::to_string(node))).string()};
    if (fresh)
      argv.insert(argv.end(), {"--fresh", "--yes"});
    fs::create_directories(run_dir_);
    daemons_[node] = std::make_unique<child_process>(
      argv, run_dir_ / ("drill-node-" + std::to_string(node) + ".out"));
  }

  // Polls until `done(status)` holds; false past the step timeout.
  template <class F>
  bool wait_for(status_probe& probe, F&& done,
                std::optional<job_status>* last = nullptr) {
    const auto t0 = clock_type::now();
    while (since(t0) < plan_.step_timeout_s) {
      auto s = probe.poll();
      if (s && s->step > 0 && !first_step_seen_) {
        first_step_seen_ = true;
        first_step_at_ = clock_type::now();
      }
      if (last)
        *last = s;
      if (done(s))
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  bool inject(status_probe& probe, fault_result& r) {
    const auto& f = r.fault;
    std::optional<job_status> s;
    const auto every = std::max<int64_t>(1,
                                         plan_.job.checkpoint.interval_steps);
    if (!wait_for(
          probe,
          [&](const auto& st) {
            if (!st || st->state != "running" || st->step < f.at_step)
              return false;
            // during_checkpoint: the newest checkpoint's step is done but
            // not yet committed, so its shards are being written.
            return !f.during_checkpoint
                   || st->step / every * every > st->last_checkpoint;
          },
          &s))
      return false;
    const auto before = *s;
    r.injected_at = before.step;
    std::printf("drill: step %lld: %s\n", static_cast<long long>(before.step),
                f.fault.c_str());
    std::fflush(stdout);
    const auto t0 = clock_type::now();
    clock_type::time_point relaunched;
    if (f.fault == "kill_daemon") {
      if (f.during_checkpoint)
        r.note = "killed while the checkpoint of step "
                 + std::to_string(before.step / every * every)
                 + " was being written";
      for (auto n : f.nodes)
        daemons_[n]->kill_and_reap();
      if (f.node == 0) {
        // The coordinator is gone with it: detection is immediate here.
        r.detect_s = since(t0);
      }
      // Until the daemon comes back, watch the coordinator notice, and
      // (elastic.min_nodes) the job go on without it.
      int64_t running_from = -1, epoch_seen = before.epoch;
      while (since(t0) < f.restart_after_s) {
        auto st = f.node == 0 ? std::nullopt : probe.poll();
        if (st && std::isnan(r.detect_s)
            && (st->recoveries > before.recoveries || st->state != "running"))
          r.detect_s = since(t0);
        if (st && !std::isnan(r.detect_s) && st->state == "running"
            && st->recoveries > before.recoveries && std::isnan(r.resume_s)) {
          if (running_from < 0)
            running_from = st->step;
          else if (st->step > running_from) {
            r.resume_s = since(t0);
            r.resumed_from = running_from;
            epoch_seen = st->epoch;
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      relaunched = clock_type::now();
      for (auto n : f.nodes)
        launch(n, false);
      if (!std::isnan(r.resume_s)) {
        // It went on without the node: back is when the regroup that takes
        // it in (a new epoch) has trained a step.
        int64_t regrouped_at = -1;
        wait_for(probe, [&](const auto& st) {
          if (!daemons_[0]->running())
            return true;
          if (!st || st->epoch <= epoch_seen || st->state != "running")
            return false;
          if (regrouped_at < 0)
            regrouped_at = st->step;
          return st->step > regrouped_at;
        });
        r.back_to_training_s = since(relaunched);
        r.note += std::string(r.note.empty() ? "" : "; ") + "went on without "
                  + (f.nodes.size() > 1 ? "them" : "it")
                  + "; taken back after the return";
        return true;
      }
    } else {
      auto done = probe.chaos({f.fault, f.rank, f.node, 0});
      if (!done) {
        r.note = "chaos refused";
        return true;
      }
    }
    if (recovered_in_place(f.fault)) {
      int64_t at = 0;
      wait_for(probe, [&](const auto& st) {
        if (st && st->restarts > before.restarts && std::isnan(r.detect_s)) {
          r.detect_s = since(t0);
          at = st->step;
        }
        return st && !std::isnan(r.detect_s) && st->step > at;
      });
      r.resume_s = since(t0);
      if (s = probe.poll(); s && s->recoveries > before.recoveries)
        r.note = "escalated to a job-level recovery";
    } else {
      // Job level: the coordinator recovers (a new epoch, or for a lost
      // coordinator, a restarted one resuming from its store).
      int64_t resumed_from = -1;
      wait_for(probe, [&](const auto& st) {
        if (!daemons_[0]->running())
          return true; // the job ended (and with it the coordinator)
        if (!st)
          return false;
        const bool recovering = st->recoveries > before.recoveries
                                || st->state != "running"
                                || (f.node == 0 && f.fault == "kill_daemon");
        if (recovering && std::isnan(r.detect_s))
          r.detect_s = since(t0);
        if (std::isnan(r.detect_s) || st->state != "running")
          return false;
        if (resumed_from < 0)
          resumed_from = st->step;
        return st->step > resumed_from;
      });
      r.resume_s = since(t0);
      if (f.fault == "kill_daemon")
        r.back_to_training_s = since(relaunched);
      r.resumed_from = resumed_from;
      if (resumed_from < 0)
        r.note = "resume not observed before the job ended";
      else
        r.redone = std::max<int64_t>(0, r.injected_at - r.resumed_from);
    }
    return true;
  }

  bool finish(status_probe& probe) {
    const auto deadline = plan_.step_timeout_s * 10;
    const int code = daemons_[0]->wait(deadline);
    ended_at_ = clock_type::now();
    for (auto& [node, d] : daemons_)
      if (node != 0)
        d->wait(30);
    (void)probe;
    return code == 0;
  }

  // Equal bit for bit; where the job may go on in a smaller layout
  // (elastic.min_nodes), equal within the world-size tolerance.
  bool same_loss(const std::string& a, const std::string& b) const {
    if (a == b)
      return true;
    if (plan_.job.elastic.min_nodes <= 0 || a == "null" || b == "null")
      return false;
    const double x = std::stod(a), y = std::stod(b);
    return std::abs(x - y) <= 1e-4 * std::abs(y);
  }
  bool same_curve(const std::map<int64_t, std::string>& actual) const {
    if (actual.size() != reference_.size())
      return false;
    for (const auto& [step, loss] : reference_)
      if (!actual.count(step) || !same_loss(actual.at(step), loss))
        return false;
    return true;
  }

  // The job's store: node 0's daemon keeps it in its data directory.
  fs::path coordinator_store() const {
    return run_dir_ / "drill-node-0" / "state";
  }

  // Steps trained again at each job-level recovery, as the coordinator
  // counted them ("N steps to train again"), in order; regroups that take
  // a returned node back are not faults.
  std::vector<int64_t> steps_trained_again() const {
    std::vector<int64_t> out;
    auto db = store::job_store::open(coordinator_store());
    if (!db.ok())
      return out;
    auto events = db.value()->events();
    if (!events.ok())
      return out;
    for (const auto& e : events.value()) {
      if (e.kind != "recovery"
          || e.detail.find("taking back returned nodes") != std::string::npos)
        continue;
      const auto at = e.detail.find(" to train again");
      if (at == std::string::npos)
        continue;
      const auto start = e.detail.rfind("; ", at);
      out.push_back(std::atoll(e.detail.c_str() + start + 2));
    }
    return out;
  }

  int report(bool completed, const std::string& why) {
    auto actual = losses(run_dir_ / "metrics.jsonl");
    const auto steps = plan_.job.train.steps;
    const bool tolerant = plan_.job.elastic.min_nodes > 0;
    const auto again = steps_trained_again();
    size_t next_again = 0;
    for (auto& r : results_)
      if (!recovered_in_place(r.fault.fault) && next_again < again.size())
        r.redone = again[next_again++];
    bool all_matched = completed && same_curve(actual);
    for (size_t i = 0; i < results_.size(); ++i) {
      auto& r = results_[i];
      const int64_t from = r.resumed_from >= 0 ? r.resumed_from + 1
                                               : r.injected_at;
      const int64_t to = i + 1 < results_.size() ? results_[i + 1].injected_at
                                                 : steps;
      r.matched = to >= from;
      for (int64_t step = from; step <= to; ++step)
        if (!actual.count(step) || !same_loss(actual[step], reference_[step]))
          r.matched = false;
      all_matched = all_matched && r.matched;
    }
    std::printf("\n%-17s %-10s %8s %9s %9s %7s  %-10s %s\n", "fault", "target",
                "at step", "detect s", "resume s", "redone", "loss curve",
                "notes");
    for (const auto& r : results_) {
      const auto& f = r.fault;
      auto target = !f.nodes.empty() ? node_list(f.nodes)
                    : f.node >= 0    ? "node " + std::to_string(f.node)
                                     : "rank " + std::to_string(f.rank);
      auto note = r.note;
      if (!std::isnan(r.back_to_training_s)) {
        char buf[96];
        std::snprintf(buf, sizeof(buf),
                      "back to training %.2f s after its return (target 15)",
                      r.back_to_training_s);
        note += (note.empty() ? "" : "; ") + std::string(buf);
      }
      if (f.fault == "kill_expert" || f.fault == "raise_expert"
          || f.fault == "nan_expert") {
        char buf[96];
        std::snprintf(buf, sizeof(buf),
                      "target: one step (%.3f s) + 0.5 s = %.3f s",
                      step_time_s_, step_time_s_ + 0.5);
        note += (note.empty() ? "" : "; ") + std::string(buf);
      }
      std::printf("%-17s %-10s %8lld %9.3f %9.3f %7lld  %-10s %s\n",
                  f.fault.c_str(), target.c_str(),
                  static_cast<long long>(r.injected_at), r.detect_s, r.resume_s,
                  static_cast<long long>(r.redone),
                  r.matched ? "matches" : "DIFFERS", note.c_str());
    }
    if (tolerant) {
      double worst = 0;
      int64_t at = 0;
      for (const auto& [step, loss] : reference_)
        if (actual.count(step) && loss != "null" && actual[step] != "null") {
          const double y = std::stod(loss);
          const double d = std::abs(std::stod(actual[step]) - y) / std::abs(y);
          if (d > worst)
            worst = d, at = step;
        }
      std::printf("\nlargest relative loss difference from the fault-free "
                  "run: %.2e (step %lld)",
                  worst, static_cast<long long>(at));
    }
    std::printf("\njob: %s; %zu of %lld steps logged; whole loss curve %s "
                "the fault-free run\n",
                completed ? "completed" : ("NOT completed: " + why).c_str(),
                actual.size(), static_cast<long long>(steps),
                actual == reference_ ? "equal to"
                : tolerant && same_curve(actual)
                  ? "within 1e-4 (elastic.min_nodes: layouts change) of"
                  : "DIFFERENT from");
    report_time_ratio();
    const bool verified = verify_checkpoints();
    std::fflush(stdout);
    return all_matched && verified ? 0 : 1;
  }

  // Effective training time ratio: the time of the steps kept over the
  // wall time from the first step to the job's end (faults, recoveries,
  // steps trained again and checkpoint stalls all lower it).
  void report_time_ratio() const {
    if (!first_step_seen_ || ended_at_ < first_step_at_)
      return;
    const double wall =
      std::chrono::duration<double>(ended_at_ - first_step_at_).count()
      + step_time_s_;
    const double kept = kept_steps_seconds(run_dir_ / "metrics.jsonl");
    std::printf("effective training time ratio: %.3f (%.1f s of steps kept "
                "in %.1f s from the first step to the end)\n",
                kept / wall, kept, wall);
  }

  // Every committed checkpoint the faults left behind must read back
  // whole (one a kill cut short was never committed: nothing resumes
  // from it, and it is named apart).
  bool verify_checkpoints() const {
    auto db = store::job_store::open(coordinator_store());
    if (!db.ok()) {
      std::printf("checkpoints: FAILED to open the job's store: %s\n",
                  db.message().c_str());
      return false;
    }
    auto committed = db.value()->checkpoints();
    if (!committed.ok()) {
      std::printf("checkpoints: FAILED to read the job's store: %s\n",
                  committed.message().c_str());
      return false;
    }
    const fs::path root = plan_.job.checkpoint.root(plan_.job.run);
    int ok = 0;
    std::vector<std::string> bad;
    std::set<std::string> kept;
    for (const auto& c : committed.value()) {
      const auto dir = root / fs::path(c.dir).filename();
      if (!fs::exists(dir))
        continue; // retention removed it
      kept.insert(dir.filename().string());
      if (auto v = store::verify_checkpoint(dir); v.ok())
        ++ok;
      else
        bad.push_back(dir.filename().string() + ": " + v.message());
    }
    int uncommitted = 0;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      const auto name = entry.path().filename().string();
      uncommitted += name.rfind("step-", 0) == 0 && !kept.count(name);
    }
    std::printf("checkpoints kept: %d committed, every one verified", ok);
    if (uncommitted > 0)
      std::printf(" (%d left uncommitted by a fault)", uncommitted);
    for (const auto& b : bad)
      std::printf("; FAILED %s", b.c_str());
    std::printf("\n");
    return bad.empty() && ok > 0;
  }

  drill_plan plan_;
  fs::path run_dir_, tuttid_;
  std::map<int64_t, std::string> reference_;
  double step_time_s_ = 0;
  std::map<int64_t, std::unique_ptr<child_process>> daemons_;
  std::vector<fault_result> results_;
  bool first_step_seen_ = false;
  clock_type::time_point first_step_at_, ended_at_;
};

} // namespace

int drill_command(const std::vector<std::string>& args) {
  command_line cl("drill", "DRILL.yaml",
                  "runs the drill's job fault-free, then on one tuttid per "
                  "node while injecting\nits faults; reports detection, "
                  "recovery and whether the loss curve matches");
  cl.positional("drill");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("drill"))
    return cl.bad("usage: tutti drill DRILL.yaml");
  auto plan = load_drill_plan(vm["drill"].as<std::string>());
  if (!plan)
    return fail(2, "drill: " + plan.message());
  return drill(std::move(*plan)).run();
}

} // namespace tutti::cli
