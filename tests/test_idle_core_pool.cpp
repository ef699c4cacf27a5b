// The idle_core_pool lends the cores of waiting ranks to busy expert
// shards. It must run every task once, really on another thread, pass a
// task's failure back, and never change the bits: an expert computed as a
// task equals the grouped call, and a whole job trains to the same losses
// with the pool as without it.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "test_support.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/model/expert_ffn.hpp"
#include "tutti/model/idle_core_pool.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

// Two members: the pool keeps one thread (joined for the whole binary).
model::idle_core_pool& pool_with_a_thread() {
  static bool joined = [] {
    auto& p = model::idle_core_pool::process();
    p.join();
    p.join();
    return true;
  }();
  (void)joined;
  return model::idle_core_pool::process();
}

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

TEST_CASE("the pool runs every task once, on its thread too", "[unit]") {
  auto& pool = pool_with_a_thread();
  REQUIRE(pool.threads() == 1);
  std::vector<std::atomic<int>> runs(200);
  std::vector<std::function<void()>> tasks;
  for (auto& r : runs)
    tasks.emplace_back([&r] { r.fetch_add(1); });
  pool.run(tasks);
  for (auto& r : runs)
    CHECK(r.load() == 1);

  // Two tasks that each wait for the other: only two threads running at
  // once can finish them (each gives up after 10 s, failing the check).
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
  auto& pool = pool_with_a_thread();
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

TEST_CASE("experts run as tasks equal the grouped call to the bit", "[unit]") {
  pool_with_a_thread();
  kernels::use_single_threaded_blas();
  const int64_t E = 4, D = 32, F = 64;
  const std::vector<int64_t> rows = {37, 0, 5, 90};
  const int64_t m = 132;
  const auto x = random_floats(m * D, 1), dy = random_floats(m * D, 2);
  const auto w1 = random_floats(E * F * D, 3), w3 = random_floats(E * F * D, 4),
             w2 = random_floats(E * D * F, 5);
  struct result {
    std::vector<float> y, dx, dw1, dw3, dw2;
  };
  auto compute = [&](bool share) {
    result r{std::vector<float>(m * D), std::vector<float>(m * D),
             std::vector<float>(E * F * D, 0.25f),
             std::vector<float>(E * F * D), std::vector<float>(E * D * F)};
    model::expert_ffn ffn(1, E, D, F);
    ffn.share_idle_cores(share);
    model::expert_block b{w1.data(),    w3.data(),    w2.data(),
                          r.dw1.data(), r.dw3.data(), r.dw2.data()};
    auto s = kernels::cpu_stream();
    ffn.forward(s, 0, b, x.data(), rows.data(), r.y.data());
    ffn.backward(s, 0, b, dy.data(), r.dx.data());
    return r;
  };
  const auto grouped = compute(false), tasks = compute(true);
  CHECK(same_bits(grouped.y, tasks.y));
  CHECK(same_bits(grouped.dx, tasks.dx));
  CHECK(same_bits(grouped.dw1, tasks.dw1));
  CHECK(same_bits(grouped.dw3, tasks.dw3));
  CHECK(same_bits(grouped.dw2, tasks.dw2));
}

TEST_CASE("a job trains to the same losses with and without the pool",
          "[integration]") {
  auto dir = scratch("idle_cores");
  auto data = dir / "data";
  REQUIRE(run(tutti_bin() + " data synth --out " + data.string()
              + " --vocab 32 --seed 5 --tokens 40000")
            .status
          == 0);
  std::vector<std::vector<double>> series;
  for (const std::string name : {"shared", "alone"}) {
    auto run_dir = dir / name;
    auto text = small_config(data.string(), run_dir.string(), 2, 6);
    if (name == "shared")
      text.replace(text.find("moe_config:\n"), 12,
                   "moe_config:\n  share_idle_cores: true\n");
    auto cfg = dir / (name + ".yaml");
    write_text(cfg, text);
    auto r = run(tutti_bin() + " run " + cfg.string() + " --quiet", 300);
    INFO(r.output);
    REQUIRE(r.status == 0);
    // The log says whether the mode took effect.
    const auto log = read_text(run_dir / "tutti.log.jsonl");
    CHECK((log.find("idle cores of the process (pool threads: 1)")
           != std::string::npos)
          == (name == "shared"));
    series.push_back(training_series(run_dir / "metrics.jsonl"));
    REQUIRE(series.back().size() == 4 * 6);
  }
  CHECK(series[1] == series[0]);
}
