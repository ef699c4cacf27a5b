#pragma once
// serve.replan: a replica that knows its ranks' racks (serve.racks, one
// per rank, or per node of serve.nodes) measures, every window of steps,
// the share of (token, slot) rows that crossed racks, and when it is above
// the bound moves experts by rack (rack_replan.hpp) between two steps: no
// request is dropped or recomputed, and the tokens are unchanged.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::serve {

class ep_ranks;

struct replan_config {
  std::vector<int32_t> rack; // per rank of the replica; empty: off
  double max_cross_rack_share = 1.0; // replan above this; 1: only measure
  int64_t window_steps = 50;
  bool enabled() const { return !rack.empty(); }
};

// serve.racks (names, one per rank) into indices, checked against the
// replica's `ranks`; errors name serve.racks.
expected<std::vector<int32_t>> rack_indices(
  const std::vector<std::string>& names, int64_t ranks);

class live_replanner {
public:
  explicit live_replanner(replan_config c) : config_(std::move(c)) {}

  // After each step of `ranks`: at the end of a window, the window's
  // cross-rack share, and a new layout when it is above the bound and the
  // plan lowers it. A layout the ranks refuse is logged, not fatal.
  void after_step(ep_ranks& ranks);

  double cross_rack_share() const { return share_; } // the last window's
  int64_t replans() const { return replans_; }

private:
  replan_config config_;
  std::vector<int64_t> start_; // [source rank][layer][expert] at window start
  int64_t steps_ = 0, replans_ = 0;
  double share_ = 0.0;
};

} // namespace tutti::serve
