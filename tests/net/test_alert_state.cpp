// observability: an alert rule's state driven step by step: the hold before
// it fires, the clear run before it resolves, flapping said once, and a
// NaN-like condition that fires at once.

#include <catch2/catch.hpp>

#include <functional>
#include <vector>

#include "tutti/observability/alert_state.hpp"

using namespace tutti::observability;

namespace {

struct tally {
  int fired = 0, flapping = 0, resolved = 0;
  std::vector<int> changed_at; // steps (from 1) where anything changed
};

// Drives `rule` for `steps` steps with the condition `on(step)`.
tally drive(alert_state& rule, int steps, const std::function<bool(int)>& on) {
  tally t;
  for (int step = 1; step <= steps; ++step) {
    const auto change = rule.observe(on(step));
    t.fired += change == alert_change::fired;
    t.flapping += change == alert_change::flapping;
    t.resolved += change == alert_change::resolved;
    if (change != alert_change::none)
      t.changed_at.push_back(step);
  }
  return t;
}

} // namespace

TEST_CASE("a condition holding hold_steps fires once", "[alert_state]") {
  alert_state rule(alert_timing{});
  auto t = drive(rule, 2, [](int) { return true; });
  CHECK(t.fired == 0); // two steps: still pending
  CHECK_FALSE(rule.firing());
  CHECK(rule.observe(true) == alert_change::fired); // the third
  t = drive(rule, 100, [](int) { return true; });
  CHECK(t.changed_at.empty()); // holding on is the same episode
  CHECK(rule.firing());
}

TEST_CASE("a pending condition that lapses starts its hold again",
          "[alert_state]") {
  alert_state rule(alert_timing{});
  // on, on, off, on, on, off, ...: never three in a row.
  auto t = drive(rule, 300, [](int s) { return s % 3 != 0; });
  CHECK(t.changed_at.empty());
}

TEST_CASE("clearing for clear_steps resolves once", "[alert_state]") {
  alert_state rule(alert_timing{});
  drive(rule, 3, [](int) { return true; });
  REQUIRE(rule.firing());
  // 9 clear steps, one relapse, then 10 clear: one resolution, at the end.
  auto t = drive(rule, 9, [](int) { return false; });
  CHECK(t.changed_at.empty());
  CHECK(rule.observe(true) == alert_change::none);
  t = drive(rule, 30, [](int) { return false; });
  CHECK(t.resolved == 1);
  CHECK(t.changed_at == std::vector<int>{10});
  CHECK_FALSE(rule.firing());
}

TEST_CASE("a NaN loss fires at once", "[alert_state]") {
  alert_state rule(alert_timing{});
  CHECK(rule.observe(true, /*at_once=*/true) == alert_change::fired);
  CHECK(rule.firing());
  // It resolves like any other: after clear_steps finite losses.
  auto t = drive(rule, 10, [](int) { return false; });
  CHECK(t.changed_at == std::vector<int>{10});
}

TEST_CASE("a condition toggling every step", "[alert_state]") {
  SECTION("never holds long enough to fire") {
    alert_state rule(alert_timing{});
    auto t = drive(rule, 1000, [](int s) { return s % 2 == 1; });
    CHECK(t.changed_at.empty());
  }
  SECTION("without a hold it fires flap_firings times, then says flapping "
          "once and stays firing") {
    alert_state rule(alert_timing{1, 1, 4, 200}); // the old, bare rule
    auto t = drive(rule, 1000, [](int s) { return s % 2 == 1; });
    CHECK(t.fired == 3);
    CHECK(t.flapping == 1);
    CHECK(t.resolved == 3);
    CHECK(rule.firing());
    CHECK(rule.flapping());
  }
}

TEST_CASE("a condition that comes and goes says it is flapping once",
          "[alert_state]") {
  alert_state rule(alert_timing{});
  // Three steps on, ten off: just long enough for each episode to fire
  // and resolve, 38 episodes in 500 steps; then quiet.
  auto t = drive(rule, 800, [](int s) { return s <= 500 && s % 13 < 3; });
  CHECK(t.fired == 3);
  CHECK(t.flapping == 1);
  CHECK(rule.recent_firings() == 0); // forgotten once it resolved
  // Three episodes resolved at clear_steps; the flapping one after a
  // whole window clear (the last on-step is 496).
  REQUIRE(t.resolved == 4);
  CHECK(t.changed_at.back() == 496 + 200);
  CHECK_FALSE(rule.firing());
  CHECK_FALSE(rule.flapping());

  // Later episodes start a new count: a plain firing again.
  CHECK(drive(rule, 3, [](int) { return true; }).fired == 1);
}

TEST_CASE("firings spread wider than the window are not flapping",
          "[alert_state]") {
  alert_state rule(alert_timing{});
  // One episode every 100 steps (from step 100): at most two within any
  // 200 steps.
  auto t = drive(rule, 999, [](int s) { return s % 100 < 3; });
  CHECK(t.fired == 9);
  CHECK(t.flapping == 0);
  CHECK(t.resolved == 9);
}

TEST_CASE("flap_firings 0 never calls a rule flapping", "[alert_state]") {
  alert_state rule(alert_timing{3, 10, 0, 200});
  // Episodes at steps 13-15, 26-28, ..., 507-509.
  auto t = drive(rule, 519, [](int s) { return s % 13 < 3; });
  CHECK(t.flapping == 0);
  CHECK(t.fired == 39);
}
