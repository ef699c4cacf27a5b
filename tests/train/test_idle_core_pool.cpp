// The idle_core_pool lends the cores of waiting ranks to busy expert
// shards: a shard posts its tiles and runs them, and a waiting thread
// (help_one, which the memory communicator calls while a rank waits) runs
// some. It must run every task once, really on the helping thread, pass a
// task's failure back, and never change the bits: tiles computed with a
// helper equal the tiles computed alone, and a whole job trains to the same
// losses with the pool as without it.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "test_support.hpp"
#include "tutti/comm/memory_communicator.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/train/expert_ffn.hpp"
#include "tutti/train/idle_core_pool.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

// Two members (joined for the whole binary), so run() posts its tasks.
train::idle_core_pool& pool_of_two() {
  static bool joined = [] {
    auto& p = train::idle_core_pool::process();
    p.join();
    p.join();
    return true;
  }();
  (void)joined;
  return train::idle_core_pool::process();
}

// A thread that does what a waiting rank does: help until told to stop.
class helper {
public:
  helper()
    : thread_([this] {
        while (!stop_.load())
          if (!train::idle_core_pool::process().help_one())
            std::this_thread::sleep_for(std::chrono::microseconds(20));
      }) {}
  ~helper() {
    stop_.store(true);
    thread_.join();
  }

private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(gen);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size()
         && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

} // namespace

TEST_CASE("the pool runs every task once, on a helping thread too",
          "[unit]") {
  auto& pool = pool_of_two();
  REQUIRE(pool.members() == 2);
  CHECK_FALSE(pool.help_one()); // nothing posted
  helper h;
  std::vector<std::atomic<int>> runs(200);
  std::vector<std::function<void()>> tasks;
  for (auto& r : runs)
    tasks.emplace_back([&r] { r.fetch_add(1); });
  pool.run(tasks);
  for (auto& r : runs)
    CHECK(r.load() == 1);

  // Two tasks that each wait for the other: only the caller and the helper
  // running at once can finish them (each gives up after 10 s, failing the
  // check).
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  bool both = true;
  auto meet = [&] {
    std::unique_lock lock(m);
    ++arrived;
    cv.notify_all();
    if (!cv.wait_for(lock, std::chrono::seconds(10),
                     [&] { return arrived == 2; }))
      both = false;
  };
  const auto lent = pool.lent_tasks();
  pool.run({meet, meet});
  CHECK(both);
  CHECK(pool.lent_tasks() == lent + 1);
}

TEST_CASE("a failing task's error reaches the caller after the others",
          "[unit]") {
  auto& pool = pool_of_two();
  helper h;
  std::atomic<int> done{0};
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 20; ++i)
    tasks.emplace_back([&, i] {
      if (i == 3)
        throw std::runtime_error("task 3 failed");
      done.fetch_add(1);
    });
  CHECK_THROWS_WITH(pool.run(tasks), "task 3 failed");
  CHECK(done.load() == 19);
}

TEST_CASE("experts' tiles shared with a helper equal them alone to the bit",
          "[unit]") {
  pool_of_two();
  kernels::use_single_threaded_blas();
  const int64_t E = 4, D = 32, F = 288; // F: a tile and a part of one
  // Experts of part of a tile, none, a tile and a part of one.
  static_assert(train::expert_ffn::row_tile == 256);
  const std::vector<int64_t> rows = {37, 0, 5, 300};
  const int64_t m = 342;
  const auto x = random_floats(m * D, 1), dy = random_floats(m * D, 2);
  const auto w1 = random_floats(E * F * D, 3), w3 = random_floats(E * F * D, 4),
             w2 = random_floats(E * D * F, 5);
  struct result {
    std::vector<float> y, dx, dw1, dw3, dw2;
  };
  auto compute = [&](bool tiles, bool share) {
    result r{std::vector<float>(m * D), std::vector<float>(m * D),
             std::vector<float>(E * F * D, 0.25f),
             std::vector<float>(E * F * D), std::vector<float>(E * D * F)};
    train::expert_ffn ffn(1, E, D, F);
    ffn.split_into_tiles(tiles);
    ffn.share_idle_cores(share);
    train::expert_block b{w1.data(),    w3.data(),    w2.data(),
                          r.dw1.data(), r.dw3.data(), r.dw2.data()};
    auto s = kernels::cpu_stream();
    ffn.forward(s, 0, b, x.data(), rows.data(), r.y.data());
    ffn.backward(s, 0, b, dy.data(), r.dx.data());
    return r;
  };
  const auto alone = compute(true, false);
  const auto lent = train::idle_core_pool::process().lent_tasks();
  result shared;
  {
    helper h;
    shared = compute(true, true);
  }
  INFO("tiles the helper ran: "
       << train::idle_core_pool::process().lent_tasks() - lent);
  CHECK(same_bits(alone.y, shared.y));
  CHECK(same_bits(alone.dx, shared.dx));
  CHECK(same_bits(alone.dw1, shared.dw1));
  CHECK(same_bits(alone.dw3, shared.dw3));
  CHECK(same_bits(alone.dw2, shared.dw2));

  // Whole experts (no tiles) compute the same up to rounding.
  const auto whole = compute(false, false);
  auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (std::abs(a[i] - b[i]) > 1e-4f * (1 + std::abs(b[i])))
        return false;
    return true;
  };
  CHECK(close(alone.y, whole.y));
  CHECK(close(alone.dx, whole.dx));
  CHECK(close(alone.dw1, whole.dw1));
  CHECK(close(alone.dw3, whole.dw3));
  CHECK(close(alone.dw2, whole.dw2));

  // The tiles compute the experts: against a plain per-row reference.
  for (int64_t i : {int64_t{0}, int64_t{40}, m - 1}) {
    const int64_t j = i < 37 ? 0 : i < 42 ? 2 : 3;
    std::vector<double> hid(F);
    for (int64_t f = 0; f < F; ++f) {
      double g = 0, u = 0;
      for (int64_t d = 0; d < D; ++d) {
        g += double(x[i * D + d]) * w1[(j * F + f) * D + d];
        u += double(x[i * D + d]) * w3[(j * F + f) * D + d];
      }
      hid[f] = g / (1 + std::exp(-g)) * u;
    }
    for (int64_t d = 0; d < D; ++d) {
      double y = 0;
      for (int64_t f = 0; f < F; ++f)
        y += hid[f] * w2[(j * D + d) * F + f];
      CHECK(alone.y[i * D + d] == Approx(y).margin(1e-4));
    }
  }
}

namespace {

// Two members of an in-process group; member 0 runs the pool's tasks while
// it waits in a collective, as a rank of a sharing job does.
struct lending_pair {
  comm::memory_hub hub{0, 2};
  std::unique_ptr<comm::communicator> c[2];

  explicit lending_pair(const std::string& name,
                        std::chrono::milliseconds timeout) {
    std::thread t[2];
    status made[2];
    for (int r = 0; r < 2; ++r)
      t[r] = std::thread([&, r] {
        comm::memory_options o{name, timeout, std::chrono::seconds(20)};
        if (r == 0)
          o.while_waiting = [](double& ran_s) {
            return train::idle_core_pool::process().help_one(&ran_s);
          };
        made[r] = comm::make_memory_communicator(hub, r, 2, o, c[r]);
      });
    for (auto& x : t)
      x.join();
    for (const auto& m : made)
      REQUIRE(m.ok());
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
    .count();
}

} // namespace

TEST_CASE("a rank waiting in an exchange runs a busy peer's tasks, and that "
          "time is lent, not waited",
          "[unit]") {
  pool_of_two();
  lending_pair g("lend", std::chrono::seconds(20));
  const auto lent_before = train::idle_core_pool::process().lent_tasks();
  std::vector<std::atomic<int>> runs(40);
  std::vector<std::function<void()>> tasks;
  for (auto& r : runs)
    tasks.emplace_back([&r] {
      r.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  std::vector<int64_t> got[2] = {std::vector<int64_t>(2),
                                 std::vector<int64_t>(2)};
  double wall0 = 0;
  status exchanged[2];
  std::thread busy([&] { // the busier shard's rank: its experts, then in
    train::idle_core_pool::process().run(tasks);
    const std::vector<int64_t> mine = {10, 11};
    exchanged[1] = g.c[1]->all_to_all(mine.data(), got[1].data(), 1);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int64_t> mine = {0, 1};
  exchanged[0] = g.c[0]->all_to_all(mine.data(), got[0].data(), 1);
  wall0 = seconds_since(t0);
  busy.join();
  for (const auto& e : exchanged)
    CHECK(e.ok());
  for (auto& r : runs)
    CHECK(r.load() == 1);
  CHECK(got[0] == std::vector<int64_t>{0, 10});
  CHECK(got[1] == std::vector<int64_t>{1, 11});
  const auto lent = train::idle_core_pool::process().lent_tasks() - lent_before;
  INFO("tasks lent " << lent << ", lent " << g.c[0]->lent_s() << " s, waited "
                     << g.c[0]->waited_s() << " s of " << wall0 << " s");
  CHECK(lent > 0);
  CHECK(g.c[0]->lent_s() >= 0.004 * static_cast<double>(lent));
  CHECK(g.c[0]->waited_s() >= 0);
  CHECK(g.c[0]->waited_s() + g.c[0]->lent_s() <= wall0 + 1e-3);
  CHECK(g.c[1]->lent_s() == 0); // it has no while_waiting
}

TEST_CASE("a rank helping when its group is aborted finishes the task, then "
          "fails",
          "[unit]") {
  pool_of_two();
  lending_pair g("lend-abort", std::chrono::seconds(20));
  std::atomic<int> done{0};
  auto slow = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    done.fetch_add(1);
  };
  std::thread busy([&] { train::idle_core_pool::process().run({slow, slow}); });
  status aborted;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    aborted = g.c[0]->abort();
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> out(2);
  const std::vector<int64_t> mine = {0, 1};
  const auto s = g.c[0]->all_to_all(mine.data(), out.data(), 1);
  const double took = seconds_since(t0);
  aborter.join();
  busy.join();
  CHECK(aborted.ok());
  CHECK_FALSE(s.ok());
  CHECK(done.load() == 2);
  CHECK(took < 5.0); // the task's 0.3 s, not the collective's 20 s timeout
}

TEST_CASE("a job trains to the same losses with and without the pool",
          "[integration]") {
  auto [dir, data] = scratch_with_data("idle_cores", 40000);
  std::vector<std::vector<double>> series;
  for (const std::string name : {"shared", "alone"}) {
    auto run_dir = dir / name;
    run_job(dir / (name + ".yaml"),
            insert_after(small_config(data.string(), run_dir.string(), 2, 6),
                         "moe_config:\n",
                         std::string("  share_idle_cores: ")
                           + (name == "shared" ? "true" : "false") + "\n"));
    // The log says whether the mode took effect.
    const auto log = read_text(run_dir / "tutti.log.jsonl");
    CHECK((log.find("experts' tiles shared with the waiting ranks")
           != std::string::npos)
          == (name == "shared"));
    series.push_back(training_series(run_dir / "metrics.jsonl"));
    REQUIRE(series.back().size() == 4 * 6);
  }
  CHECK(series[1] == series[0]);
}
