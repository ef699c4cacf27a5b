#pragma once
// One alert rule's state, judged once per step (the coordinator's clock).
// A condition fires the rule only after holding for hold_steps steps in a
// row (Prometheus's `for:`), and a firing rule resolves only after its
// condition has been clear for clear_steps in a row, so an episode is one
// firing and one resolution. A rule that fires flap_firings times within
// flap_window_steps is flapping: that firing says so, and the rule stays
// firing until clear for flap_window_steps (Alertmanager's grouping and
// repeat interval), so a condition that comes and goes is not an alert
// storm.

#include <cstdint>
#include <deque>

namespace tutti::observability {

struct alert_timing {
  int64_t hold_steps = 3;
  int64_t clear_steps = 10;
  int64_t flap_firings = 4; // 0: never flapping
  int64_t flap_window_steps = 200;
};

// What one step's observation changed.
enum class alert_change {
  none,
  fired,    // a new episode
  flapping, // a new episode, the flap_firings-th within the window
  resolved,
};

class alert_state {
public:
  explicit alert_state(alert_timing timing) : timing_(timing) {}

  // The rule's condition at the next step. `at_once`: fire without waiting
  // for hold_steps (a NaN loss does not get better by waiting).
  alert_change observe(bool condition, bool at_once = false);

  bool firing() const { return firing_; }
  bool flapping() const { return flapping_; }
  // Firings within the last flap_window_steps, the current one included.
  int64_t recent_firings() const {
    return static_cast<int64_t>(fired_at_.size());
  }
  const alert_timing& timing() const { return timing_; }

private:
  alert_change fire();

  alert_timing timing_;
  int64_t step_ = 0;    // observations so far
  int64_t held_ = 0;    // steps in a row the condition held, while not firing
  int64_t cleared_ = 0; // steps in a row it was clear, while firing
  bool firing_ = false;
  bool flapping_ = false;
  std::deque<int64_t> fired_at_; // the observations that fired, in the window
};

} // namespace tutti::observability
