#pragma once
// Which rank trains on which window of a step, by where the windows' tokens
// will go (data.rack_affinity): the windows of one expert-parallel group
// are dealt first to racks, then within each rack to its ranks, each
// window where most of its tokens' experts are, every rank keeping its
// share. Greedy: windows that prefer one place most strongly choose
// first. A pure function of its inputs, so every rank computes the same
// deal without talking to the others.

#include <cstdint>
#include <vector>

namespace tutti::data {

// votes[w][m]: how many of window w's tokens' experts member m holds.
// rack_of_member[m]: its rack (equal numbers: one rack). Each member takes
// per_member windows; votes.size() must be members * per_member. Returns
// each member's windows (indices into votes), in increasing order.
std::vector<std::vector<int64_t>> deal_by_affinity(
  const std::vector<std::vector<double>>& votes,
  const std::vector<int64_t>& rack_of_member, int64_t per_member);

} // namespace tutti::data
