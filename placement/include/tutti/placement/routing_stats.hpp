#pragma once
// Which experts the routers choose, counted over a window of training
// steps: tokens per expert per layer, co-activation (two experts of one
// layer chosen by the same token) and transitions (a token's expert at
// layer l and its expert at layer l+1). The placement planner reads them to
// put experts that work together on the same rack.
//
// Counting is a pure function of the routing decisions ([layer][token][k]
// expert ids); windows of several ranks or steps add up with merge(), and
// to_flat()/from_flat() give one int64 array to all-reduce.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::placement {

struct routing_stats {
  int64_t layers = 0, experts = 0, top_k = 0;
  int64_t first_step = 0, last_step = 0; // the window, inclusive; 0 = none
  int64_t tokens = 0;                    // tokens counted (each layer)
  std::vector<int64_t> load;             // [layer][expert]
  std::vector<int64_t> coactivation;     // [layer][e][f], symmetric, e != f
  std::vector<int64_t> transitions;      // [layer < L-1][e at l][f at l+1]

  static routing_stats zeros(int64_t layers, int64_t experts, int64_t top_k);

  // One batch's routing: ids[(l * tokens + t) * top_k + j], every id in
  // [0, experts) or `unrouted` (a layer without experts, a dense one: not
  // counted). An id out of range is refused (nothing is counted).
  static constexpr int32_t unrouted = -1;
  status add(const int32_t* ids, int64_t tokens_in_batch);
  // Adds another window's counts of the same shape; the window widens.
  status merge(const routing_stats& other);

  int64_t load_at(int64_t l, int64_t e) const { return load[l * experts + e]; }
  int64_t coactivation_at(int64_t l, int64_t e, int64_t f) const {
    return coactivation[(l * experts + e) * experts + f];
  }
  int64_t transition_at(int64_t l, int64_t e, int64_t f) const {
    return transitions[(l * experts + e) * experts + f];
  }
  // max/mean of layer l's load (1 = even; 0 when nothing was counted).
  double imbalance(int64_t l) const;

  // tokens, load, coactivation, transitions in one array (for all-reduce).
  std::vector<int64_t> to_flat() const;
  status from_flat(const std::vector<int64_t>& flat);

  std::string to_json() const;
  static expected<routing_stats> from_json(const std::string& text);
};

} // namespace tutti::placement
