#pragma once
// A replica's circuit breaker: closed (requests flow) until `failures`
// requests in a row fail, then open (no requests) for `open_for`, then
// half-open: one trial request; its success closes the breaker, its failure
// opens it again. Not thread-safe: the replica pool's lock guards it.

#include <chrono>
#include <cstdint>

namespace tutti::gateway {

class circuit_breaker {
public:
  using clock = std::chrono::steady_clock;
  enum class state { closed, open, half_open };

  circuit_breaker(int64_t failures, clock::duration open_for)
    : threshold_(failures), open_for_(open_for) {}

  // May a request go now? In half-open, true once (the trial) until it ends.
  bool allow(clock::time_point now) {
    if (state_ == state::open && now >= open_until_) {
      state_ = state::half_open;
      trial_out_ = false;
    }
    if (state_ == state::closed)
      return true;
    if (state_ == state::half_open && !trial_out_) {
      trial_out_ = true;
      return true;
    }
    return false;
  }
  // Would allow() say yes, without taking the trial?
  bool would_allow(clock::time_point now) const {
    if (state_ == state::closed)
      return true;
    if (state_ == state::open)
      return now >= open_until_;
    return !trial_out_;
  }
  void succeeded() {
    state_ = state::closed;
    failures_ = 0;
    trial_out_ = false;
  }
  // True when this failure opened the breaker.
  bool failed(clock::time_point now) {
    ++failures_;
    if (state_ == state::half_open
        || (state_ == state::closed && failures_ >= threshold_)) {
      state_ = state::open;
      open_until_ = now + open_for_;
      ++opened_;
      return true;
    }
    return false;
  }
  // A request that ended without a verdict (client gone): frees the trial.
  void abandoned() { trial_out_ = false; }

  state current() const { return state_; }
  int64_t times_opened() const { return opened_; }

private:
  int64_t threshold_;
  clock::duration open_for_;
  state state_ = state::closed;
  int64_t failures_ = 0;
  int64_t opened_ = 0;
  bool trial_out_ = false;
  clock::time_point open_until_{};
};

inline const char* state_name(circuit_breaker::state s) {
  switch (s) {
  case circuit_breaker::state::closed:
    return "closed";
  case circuit_breaker::state::open:
    return "open";
  default:
    return "half_open";
  }
}

} // namespace tutti::gateway
