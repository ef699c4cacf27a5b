// Automatic bit-exact resume: the quickstart model runs 60 steps without a
// break; then from scratch with kill -9 at three random steps (one while a
// checkpoint is being written), restarted each time with the same command.
// Every step's loss and the final weights' hashes must match bit for bit.
// A corrupt newest checkpoint is named and skipped for the one before.

#include <catch2/catch.hpp>

#include <csignal>
#include <random>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/job_store.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

std::string quickstart_like(const fs::path& data, const fs::path& run,
                            int steps, int interval) {
  auto text = read_text(fs::path(source_dir()) / "configs/quickstart.yaml");
  auto set = [&](const std::string& key, const std::string& value) {
    auto at = text.find("  " + key + ":");
    auto end = text.find('\n', at);
    text.replace(at, end - at, "  " + key + ": " + value);
  };
  set("steps", std::to_string(steps));
  set("eval_interval", "20");
  set("eval_sequences", "32");
  set("dir", data.string()); // data.dir comes first in the file
  auto run_at = text.rfind("  dir:");
  text.replace(run_at, text.find('\n', run_at) - run_at,
               "  dir: " + run.string());
  text += "checkpoint:\n  interval_steps: " + std::to_string(interval)
          + "\n  keep_last: 3\n";
  return text;
}

int last_step(const fs::path& metrics) {
  auto s = metric_series(metrics, "step");
  return s.empty() ? 0 : static_cast<int>(s.back());
}

// The step of the newest checkpoint with a MANIFEST, or 0 (a cheap first
// test: the store may not record it yet).
int newest_manifest(const fs::path& run_dir) {
  int newest = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir / "checkpoints", ec))
    if (fs::exists(e.path() / "MANIFEST"))
      newest = std::max(newest,
                        std::stoi(e.path().filename().string().substr(5)));
  return newest;
}

// Whether the job store records a checkpoint newer than `step`. The
// MANIFEST is written before the store records the commit, so a MANIFEST
// alone may still be an uncommitted checkpoint that a resume ignores.
bool store_committed_after(const fs::path& run_dir, int step) {
  auto db = tutti::store::job_store::open_read_only(run_dir / "state");
  if (!db.ok())
    return false;
  auto all = db.value()->checkpoints();
  return all.ok() && !all.value().empty() && all.value().back().step > step;
}

// Runs `tutti run CFG --quiet` until it ends or metrics reach `kill_at`
// (and, when commit_after >= 0, the store records a checkpoint newer than
// that step), then kill -9. Returns the exit status (or -9 when killed).
int run_until(const fs::path& cfg, const fs::path& metrics, int kill_at,
              const fs::path& log, const char* write_delay_ms = "700",
              int commit_after = -1) {
  pid_t pid = fork();
  if (pid == 0) {
    auto fd = fopen(log.c_str(), "a");
    dup2(fileno(fd), 1);
    dup2(fileno(fd), 2);
    setenv("TUTTI_CKPT_WRITE_DELAY_MS", write_delay_ms, 1);
    auto bin = tutti_bin();
    execl(bin.c_str(), bin.c_str(), "run", cfg.c_str(), "--quiet", nullptr);
    _exit(127);
  }
  for (int i = 0; i < 30000;
       ++i) { // 300 s, polled every 10 ms (steps are fast)
    int raw = 0;
    if (waitpid(pid, &raw, WNOHANG) == pid)
      return WIFEXITED(raw) ? WEXITSTATUS(raw) : -WTERMSIG(raw);
    if (kill_at > 0 && last_step(metrics) >= kill_at
        && (commit_after < 0
            || (newest_manifest(metrics.parent_path()) > commit_after
                && store_committed_after(metrics.parent_path(),
                                         commit_after)))) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return -9;
    }
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

std::map<std::string, uint64_t> final_hashes(const fs::path& run, int step) {
  std::map<std::string, uint64_t> out;
  auto dir = run / "checkpoints" / tutti::store::checkpoint_dir_name(step);
  for (int r = 0; r < 2; ++r) {
    auto f = tutti::store::read_shard_file(
      dir / tutti::store::shard_file_name(r), false);
    REQUIRE(f.ok());
    for (const auto& t : f.value().tensors)
      out[std::to_string(r) + "/" + t.name] = t.xxh64;
  }
  return out;
}

} // namespace

TEST_CASE("kill -9 at three random steps resumes bit-exactly", "[fault]") {
  auto dir = scratch("resume");
  auto data = dir / "data";
  REQUIRE(synth_data(data, 16, 200000, 7));
  // Kills land by step 55 and wait for a commit (written 700 ms late):
  // the run must outlast that however fast a step is (a quickstart step is
  // a few tens of milliseconds now), or a life would finish the job.
  const int steps = 150, interval = 10;
  auto a_cfg = dir / "a.yaml";
  write_text(a_cfg, quickstart_like(data, dir / "a", steps, interval));
  REQUIRE(run_until(a_cfg, dir / "a" / "metrics.jsonl", 0, dir / "a.log") == 0);
  auto a_loss = metric_series(dir / "a" / "metrics.jsonl", "loss");
  REQUIRE(a_loss.size() == steps);

  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  // One kill lands right after a checkpoint step (its shards are held by
  // the writer's delay, so it is not committed yet); two anywhere once a
  // newer checkpoint than the life started from is committed, so that the
  // restart after them resumes rather than starting over.
  // {step, whether the kill waits for a newer committed checkpoint}. Only
  // the first kill is meant to land mid-checkpoint; a random draw that is
  // a multiple of the interval must still wait for a commit, or every life
  // could die before one and the job would never resume.
  std::vector<std::pair<int, bool>> kills{
    {interval * std::uniform_int_distribution<int>(1, 4)(rng), false},
    {std::uniform_int_distribution<int>(5, 55)(rng), true},
    {std::uniform_int_distribution<int>(5, 55)(rng), true}};
  std::sort(kills.begin(), kills.end());
  INFO("kill steps " << kills[0].first << ", " << kills[1].first << ", "
                     << kills[2].first << " (seed " << seed << ")");
  auto b_cfg = dir / "b.yaml";
  write_text(b_cfg, quickstart_like(data, dir / "b", steps, interval));
  auto b_metrics = dir / "b" / "metrics.jsonl";
  for (auto [k, after_commit] : kills) {
    // Each life must get further than the last resume point.
    if (last_step(b_metrics) >= k)
      k = last_step(b_metrics) + 2;
    int status = run_until(b_cfg, b_metrics, k, dir / "b.log", "700",
                           after_commit ? newest_manifest(dir / "b") : -1);
    INFO(read_text(dir / "b.log"));
    REQUIRE((status == -9 || status == 0));
  }
  int status = run_until(b_cfg, b_metrics, 0, dir / "b.log");
  auto log = read_text(dir / "b.log");
  INFO(log);
  REQUIRE(status == 0);
  CHECK(log.find("resuming after step") != std::string::npos);

  auto b_loss = metric_series(b_metrics, "loss");
  REQUIRE(b_loss.size() == steps);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s + 1);
    CHECK(b_loss[s] == a_loss[s]); // printed at round-trip precision
  }
  CHECK(final_hashes(dir / "a", steps) == final_hashes(dir / "b", steps));
}

TEST_CASE("a corrupt newest checkpoint is named and skipped", "[fault]") {
  auto dir = scratch("resume_corrupt");
  auto data = dir / "data";
  REQUIRE(synth_data(data, 16, 200000, 7));
  for (std::string damage : {"flip", "manifest"}) {
    auto run_dir = dir / damage;
    auto cfg = dir / (damage + ".yaml");
    write_text(cfg, quickstart_like(data, run_dir, 40, 10));
    auto metrics = run_dir / "metrics.jsonl";
    // Killed once the store records step 30's checkpoint, before step 40's.
    REQUIRE(run_until(cfg, metrics, 32, dir / (damage + ".log"), "0", 25)
            == -9);
    {
      auto db = tutti::store::job_store::open(run_dir / "state");
      REQUIRE(db.ok());
      auto all = db.value()->checkpoints();
      REQUIRE(all.ok());
      REQUIRE(!all.value().empty());
      REQUIRE(all.value().back().step == 30);
    }
    auto newest = run_dir / "checkpoints"
                  / tutti::store::checkpoint_dir_name(30);
    REQUIRE(fs::exists(newest / "MANIFEST"));
    std::string victim;
    if (damage == "flip") {
      victim = (newest / tutti::store::shard_file_name(1)).string();
      auto bytes = read_text(victim);
      bytes[bytes.size() - 100] ^= 0x5a;
      std::ofstream(victim, std::ios::binary) << bytes;
    } else {
      victim = (newest / "MANIFEST").string();
      auto bytes = read_text(victim);
      std::ofstream(victim, std::ios::binary)
        << bytes.substr(0, bytes.size() / 2);
    }
    auto log = dir / (damage + ".log");
    REQUIRE(run_until(cfg, metrics, 0, log, "0") == 0);
    auto text = read_text(log);
    INFO(text);
    CHECK(text.find(fs::path(victim).filename().string()) != std::string::npos);
    CHECK(text.find("resuming after step 20") != std::string::npos);
    CHECK(last_step(metrics) == 40);
  }
}
