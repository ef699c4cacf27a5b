#include "tutti/observability/alert_state.hpp"

#include <algorithm>

namespace tutti::observability {

alert_change alert_state::observe(bool condition, bool at_once) {
  ++step_;
  while (!fired_at_.empty()
         && fired_at_.front() <= step_ - timing_.flap_window_steps)
    fired_at_.pop_front();
  if (!firing_) {
    held_ = condition ? held_ + 1 : 0;
    if (condition && (at_once || held_ >= timing_.hold_steps))
      return fire();
    return alert_change::none;
  }
  cleared_ = condition ? 0 : cleared_ + 1;
  // A flapping rule waits out a whole window, so it does not start over.
  const auto needed = flapping_ ? std::max(timing_.flap_window_steps,
                                           timing_.clear_steps)
                                : timing_.clear_steps;
  if (cleared_ < needed)
    return alert_change::none;
  firing_ = false;
  held_ = 0;
  if (flapping_) {
    flapping_ = false;
    fired_at_.clear();
  }
  return alert_change::resolved;
}

alert_change alert_state::fire() {
  firing_ = true;
  cleared_ = 0;
  fired_at_.push_back(step_);
  flapping_ = timing_.flap_firings > 0
              && recent_firings() >= timing_.flap_firings;
  return flapping_ ? alert_change::flapping : alert_change::fired;
}

} // namespace tutti::observability
