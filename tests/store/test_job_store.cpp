// job_store: persistence across reopen, removal, reset, locking, corruption.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <thread>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/job_store.hpp"

namespace fs = std::filesystem;
using namespace tutti::store;

namespace {

std::unique_ptr<job_store> open_ok(const fs::path& dir) {
  auto s = job_store::open(dir);
  INFO(s.message());
  REQUIRE(s.ok());
  REQUIRE(s.value() != nullptr);
  return std::move(s.value());
}

std::int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

std::vector<std::int64_t> steps_of(job_store& s) {
  auto c = s.checkpoints();
  INFO(c.message());
  REQUIRE(c.ok());
  std::vector<std::int64_t> out;
  for (auto& r : c.value())
    out.push_back(r.step);
  return out;
}

} // namespace

TEST_CASE("job store keeps spec, state, checkpoints and events across reopen",
          "[job_store]") {
  auto dir = tutti::testing::scratch("job_store_persist") / "a"
             / "store"; // parents created
  std::int64_t before_third = 0;
  {
    auto s = open_ok(dir);
    CHECK(s->job_spec().ok());
    CHECK_FALSE(s->job_spec().value().has_value());
    CHECK_FALSE(s->job_state().value().has_value());
    CHECK(s->checkpoints().value().empty());
    REQUIRE(s->put_job_spec("fp-123", "model:\n  hidden_size: 32\n"));
    REQUIRE(s->put_job_state("running", 0));
    REQUIRE(s->put_job_state("running", 40)); // replaces
    for (std::int64_t step : {30, 10, 20})    // committed out of order
      REQUIRE(s->commit_checkpoint({step, "/ckpt/" + checkpoint_dir_name(step),
                                    step * 100, 1000 + step, 2}));
    CHECK(s->append_event("job_started", "fresh start").value() == 1);
    CHECK(s->append_event("checkpoint_committed", "step 10", 1.5).value() == 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    before_third = now_ms();
    CHECK(s->append_event("resume", "from step 30").value() == 3);
  }
  auto s = open_ok(dir);
  auto spec = s->job_spec();
  REQUIRE(spec.ok());
  REQUIRE(spec.value().has_value());
  CHECK(spec.value()->first == "fp-123");
  CHECK(spec.value()->second == "model:\n  hidden_size: 32\n");
  auto state = s->job_state();
  REQUIRE(state.value().has_value());
  CHECK(state.value()->first == "running");
  CHECK(state.value()->second == 40);

  auto ckpts = s->checkpoints();
  REQUIRE(ckpts.ok());
  REQUIRE(ckpts.value().size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    std::int64_t step = 10 * static_cast<std::int64_t>(i + 1); // ascending
    CHECK(ckpts.value()[i].step == step);
    CHECK(ckpts.value()[i].dir == "/ckpt/" + checkpoint_dir_name(step));
    CHECK(ckpts.value()[i].bytes == step * 100);
    CHECK(ckpts.value()[i].time_unix_ms == 1000 + step);
    CHECK(ckpts.value()[i].epoch == 2);
  }

  auto ev = s->events();
  REQUIRE(ev.ok());
  REQUIRE(ev.value().size() == 3);
  CHECK(ev.value()[0].seq == 1);
  CHECK(ev.value()[0].kind == "job_started");
  CHECK(ev.value()[0].detail == "fresh start");
  CHECK(ev.value()[0].duration_s == -1);
  CHECK(ev.value()[1].duration_s == 1.5);
  CHECK(ev.value()[2].seq == 3);
  CHECK(ev.value()[0].time_unix_ms <= ev.value()[2].time_unix_ms);
  CHECK(ev.value()[2].time_unix_ms >= before_third);

  // Sequence numbers continue after reopen.
  CHECK(s->append_event("checkpoint_failed", "disk full").value() == 4);
  auto recent = s->events(before_third);
  REQUIRE(recent.ok());
  REQUIRE(recent.value().size() == 2);
  CHECK(recent.value()[0].kind == "resume");
  CHECK(recent.value()[1].seq == 4);
  CHECK(s->events(now_ms() + 60'000).value().empty());
}

TEST_CASE("job store: checkpoint time defaults to now; negative steps refused",
          "[job_store]") {
  auto s = open_ok(tutti::testing::scratch("job_store_time"));
  auto t0 = now_ms();
  REQUIRE(s->commit_checkpoint({5, "d", 1, 0, 0}));
  auto c = s->checkpoints();
  REQUIRE(c.value().size() == 1);
  CHECK(c.value()[0].time_unix_ms >= t0);
  auto err = s->commit_checkpoint({-1, "d", 1, 0, 0});
  REQUIRE_FALSE(err.ok());
  CHECK_THAT(err.message(), Catch::Contains("negative step"));
}

TEST_CASE("job store removes checkpoints durably", "[job_store]") {
  auto dir = tutti::testing::scratch("job_store_remove");
  {
    auto s = open_ok(dir);
    for (std::int64_t step : {10, 20, 30})
      REQUIRE(s->commit_checkpoint({step, "d", 1, 1, 0}));
    REQUIRE(s->remove_checkpoint(20));
    REQUIRE(s->remove_checkpoint(999)); // idempotent
    CHECK(steps_of(*s) == std::vector<std::int64_t>{10, 30});
  }
  auto s = open_ok(dir);
  CHECK(steps_of(*s) == std::vector<std::int64_t>{10, 30});
}

TEST_CASE("job store reset drops everything and restarts event numbering",
          "[job_store]") {
  auto dir = tutti::testing::scratch("job_store_reset");
  {
    auto s = open_ok(dir);
    REQUIRE(s->put_job_spec("fp", "yaml"));
    REQUIRE(s->put_job_state("completed", 60));
    REQUIRE(s->commit_checkpoint({60, "d", 1, 1, 0}));
    for (int i = 0; i < 5; ++i)
      REQUIRE(s->append_event("e", "x").ok());
    REQUIRE(s->reset());
    CHECK_FALSE(s->job_spec().value().has_value());
    CHECK(s->append_event("job_started", "after --fresh").value() == 1);
  }
  auto s = open_ok(dir);
  CHECK_FALSE(s->job_spec().value().has_value());
  CHECK_FALSE(s->job_state().value().has_value());
  CHECK(s->checkpoints().value().empty());
  auto ev = s->events();
  REQUIRE(ev.value().size() == 1);
  CHECK(ev.value()[0].kind == "job_started");
  CHECK(s->append_event("e", "x").value() == 2);
}

TEST_CASE("job store refuses a second open in the same process",
          "[job_store]") {
  auto dir = tutti::testing::scratch("job_store_lock_same");
  auto first = open_ok(dir);
  auto second = job_store::open(dir);
  REQUIRE_FALSE(second.ok());
  CHECK_THAT(second.message(),
             Catch::Contains("locked") && Catch::Contains(dir.string()));
  first.reset();
  CHECK(job_store::open(dir).ok()); // released on close
}

// Child side of the next test (hidden; run only by name): holds the store
// open until its stdin closes.
TEST_CASE("job store holder (child process)", "[.][job_store_holder]") {
  const char* dir = std::getenv("TUTTI_TEST_STORE_DIR");
  REQUIRE(dir != nullptr);
  auto s = open_ok(dir);
  std::ofstream(fs::path(dir).parent_path() / "holder-ready") << "ready\n";
  char c;
  while (::read(0, &c, 1) > 0) {
  }
}

TEST_CASE("job store refuses a store held by another process", "[job_store]") {
  auto root = tutti::testing::scratch("job_store_lock_other");
  auto dir = root / "store";
  int to_child[2];
  REQUIRE(::pipe(to_child) == 0);
  ::setenv("TUTTI_TEST_STORE_DIR", dir.c_str(), 1);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(to_child[0], 0);
    ::close(to_child[1]);
    int null_fd = ::open("/dev/null",
                         O_WRONLY); // only async-signal-safe calls before exec
    ::dup2(null_fd, 1);
    ::execl("/proc/self/exe", "test_job_store",
            "job store holder (child process)", nullptr);
    ::_exit(127);
  }
  ::close(to_child[0]);
  for (int i = 0; i < 300 && !fs::exists(root / "holder-ready"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  bool ready = fs::exists(root / "holder-ready");
  auto second = job_store::open(dir);
  ::close(to_child[1]); // lets the child exit
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  REQUIRE(ready);
  REQUIRE_FALSE(second.ok());
  CHECK_THAT(second.message(), Catch::Contains("locked by another process")
                                 && Catch::Contains(dir.string()));
  CHECK(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  CHECK(job_store::open(dir).ok()); // the child's exit released the lock
}

TEST_CASE("job store reports a corrupt store and an unusable path",
          "[job_store]") {
  auto dir = tutti::testing::scratch("job_store_corrupt");
  open_ok(dir);
  std::ofstream(dir / "CURRENT", std::ios::trunc)
    << "MANIFEST-000001"; // no newline
  auto s = job_store::open(dir);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), Catch::Contains("corrupt")
                            && Catch::Contains(dir.string())
                            && Catch::Contains("rocksdb: "));

  auto file = tutti::testing::scratch("job_store_not_dir") / "plain-file";
  std::ofstream(file) << "x";
  auto t = job_store::open(file);
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.message(), Catch::Contains(file.string()));
}
