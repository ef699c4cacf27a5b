#pragma once
// Live replanning of a serving replica's experts by rack (serve.replan): a
// token is computed where its sequence lives (its rank's attention and KV
// cache), and each of its (token, slot) rows crosses to the rank holding
// the chosen expert. A row crosses racks when that rank is in another rack.
// From the rows each rank sent to each expert over a window of steps, the
// replanner puts each expert in the rack its rows mostly come from, every
// rank keeping as many experts of each layer as it held (so the load bound
// the layout had, it keeps), and an expert that may stay on its rank stays.

#include <cstdint>
#include <vector>

#include "tutti/serve/expert_layout.hpp"

namespace tutti::serve {

// rows: [source rank][layer][expert] rows routed; rack: per rank, a rack
// index. The share of rows whose expert is in another rack than their
// source (0 without rows).
double cross_rack_share(const expert_layout& x,
                        const std::vector<int64_t>& rows,
                        const std::vector<int32_t>& rack);

// A layout with each layer's experts moved towards their rows' racks; the
// ranks' expert counts per layer are `current`'s. Deterministic.
expert_layout plan_by_origin(const expert_layout& current,
                             const std::vector<int64_t>& rows,
                             const std::vector<int32_t>& rack);

} // namespace tutti::serve
