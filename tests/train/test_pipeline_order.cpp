// The pipeline schedules (train/pipeline_order.hpp), run on paper: every
// stage's ops in its order, a forward waiting for the previous virtual
// stage's forward of its micro-batch and a backward for the next one's
// backward (sends never wait, as the interleaved schedule's are posted and
// left). Every (p, v, m) below finishes (no stage waits for a stage that
// waits on it), runs each micro-batch's forward and backward once per
// chunk, backward after forward, and with equal op times its bubble is
// exactly (p - 1) / (v m + p - 1) of the step; micro_batches_in_flight
// matches the activations the order keeps.

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <tuple>

#include "tutti/train/pipeline_order.hpp"

using namespace tutti::train;

namespace {

struct simulated {
  bool finished = false;
  double step = 0;               // when the last op ends
  std::vector<double> busy;      // per stage
};

// Forwards take 1 / v of a layer block's time, backwards twice that.
simulated simulate(int64_t p, int64_t v, int64_t m) {
  std::vector<std::vector<pipeline_op>> orders;
  for (int64_t s = 0; s < p; ++s)
    orders.push_back(pipeline_order(p, v, m, s));
  const double tf = 1.0 / static_cast<double>(v), tb = 2 * tf;
  // End time of (forward, micro, virtual stage).
  std::map<std::tuple<bool, int64_t, int64_t>, double> done;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  simulated out;
  out.busy.assign(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      while (next[s] < orders[s].size()) {
        const auto op = orders[s][next[s]];
        const int64_t vs = op.chunk * p + s;
        double ready = free_at[s];
        if (op.forward && vs > 0) {
          auto it = done.find({true, op.micro, vs - 1});
          if (it == done.end())
            break;
          ready = std::max(ready, it->second);
        }
        if (!op.forward) {
          REQUIRE(done.count({true, op.micro, vs}) == 1);
          if (vs + 1 < p * v) {
            auto it = done.find({false, op.micro, vs + 1});
            if (it == done.end())
              break;
            ready = std::max(ready, it->second);
          }
        }
        const double t = op.forward ? tf : tb;
        REQUIRE(done.emplace(std::tuple{op.forward, op.micro, vs}, ready + t)
                  .second); // once each
        free_at[s] = ready + t;
        out.busy[s] += t;
        out.step = std::max(out.step, free_at[s]);
        ++next[s];
        progress = true;
      }
    }
  }
  out.finished = true;
  for (int64_t s = 0; s < p; ++s)
    out.finished = out.finished && next[s] == orders[s].size();
  return out;
}

} // namespace

TEST_CASE("1F1B and interleaved 1F1B finish with the formula's bubble",
          "[unit]") {
  for (int64_t p : {2, 3, 4, 8})
    for (int64_t v : {1, 2, 3, 4})
      for (int64_t m : {p, 2 * p, 4 * p}) {
        INFO("p " << p << " v " << v << " m " << m);
        const auto sim = simulate(p, v, m);
        REQUIRE(sim.finished);
        const double formula = static_cast<double>(p - 1)
                               / static_cast<double>(v * m + p - 1);
        for (int64_t s = 0; s < p; ++s) {
          INFO("stage " << s);
          CHECK(sim.busy[s] == Approx(3.0 * m));
          CHECK(1 - sim.busy[s] / sim.step == Approx(formula));
        }
      }
}

TEST_CASE("plain 1F1B runs p - s - 1 forwards first", "[unit]") {
  const auto order = pipeline_order(4, 1, 8, 1);
  REQUIRE(order.size() == 16);
  for (int i = 0; i < 2; ++i)
    CHECK((order[i].forward && order[i].micro == i));
  CHECK(!order[3].forward);
  CHECK(order[3].micro == 0);
  CHECK(micro_batches_in_flight(4, 1, 8, 0) == 4);
  CHECK(micro_batches_in_flight(4, 1, 8, 3) == 1);
  CHECK(micro_batches_in_flight(4, 1, 2, 0) == 2);
}

TEST_CASE("interleaved 1F1B takes each chunk over p micro-batches",
          "[unit]") {
  // p 2, v 2, m 4, stage 0: warm-up (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4.
  const auto order = pipeline_order(2, 2, 4, 0);
  const std::vector<std::tuple<bool, int64_t, int64_t>> head{
    {true, 0, 0}, {true, 1, 0}, {true, 0, 1}, {true, 1, 1},
    {true, 2, 0}, {false, 0, 1}, {true, 3, 0}, {false, 1, 1}};
  for (size_t i = 0; i < head.size(); ++i) {
    INFO("op " << i);
    CHECK(std::tuple{order[i].forward, order[i].micro, order[i].chunk}
          == head[i]);
  }
  // Micro-batch 0 lives until its chunk-0 backward, after 2 and 3 started.
  CHECK(micro_batches_in_flight(2, 2, 4, 0) == 4);
  CHECK(micro_batches_in_flight(2, 2, 8, 1) <= 4);
}
