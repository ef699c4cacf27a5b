#include "tutti/data/affinity_deal.hpp"

#include <algorithm>
#include <numeric>

namespace tutti::data {

namespace {

// Puts each of `windows` in one of the groups (score[w][g], room[g] left),
// the windows with the widest margin between their best and second-best
// group first, ties by index; a full best group sends a window to its next
// best with room.
std::vector<int64_t> greedy(const std::vector<int64_t>& windows,
                            const std::vector<std::vector<double>>& score,
                            std::vector<int64_t> room) {
  const auto G = room.size();
  std::vector<double> margin(windows.size(), 0.0);
  for (size_t i = 0; i < windows.size(); ++i) {
    auto s = score[windows[i]];
    std::sort(s.begin(), s.end(), std::greater<>());
    margin[i] = G > 1 ? s[0] - s[1] : 0.0;
  }
  std::vector<size_t> order(windows.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return margin[a] > margin[b]; });
  std::vector<int64_t> group(windows.size(), -1);
  for (size_t i : order) {
    const auto& s = score[windows[i]];
    int64_t best = -1;
    for (size_t g = 0; g < G; ++g)
      if (room[g] > 0 && (best < 0 || s[g] > s[size_t(best)]))
        best = int64_t(g);
    group[i] = best;
    --room[size_t(best)];
  }
  return group;
}

} // namespace

std::vector<std::vector<int64_t>> deal_by_affinity(
  const std::vector<std::vector<double>>& votes,
  const std::vector<int64_t>& rack_of_member, int64_t per_member) {
  const auto members = rack_of_member.size();
  // Racks in order of first appearance, and each one's members.
  std::vector<int64_t> racks;
  std::vector<std::vector<size_t>> members_of;
  for (size_t m = 0; m < members; ++m) {
    auto at = std::find(racks.begin(), racks.end(), rack_of_member[m]);
    if (at == racks.end()) {
      racks.push_back(rack_of_member[m]);
      members_of.emplace_back();
      at = racks.end() - 1;
    }
    members_of[size_t(at - racks.begin())].push_back(m);
  }
  std::vector<int64_t> all(votes.size());
  std::iota(all.begin(), all.end(), int64_t{0});
  std::vector<std::vector<double>> rack_votes(
    votes.size(), std::vector<double>(racks.size(), 0.0));
  std::vector<int64_t> rack_room(racks.size());
  for (size_t r = 0; r < racks.size(); ++r) {
    rack_room[r] = per_member * int64_t(members_of[r].size());
    for (size_t w = 0; w < votes.size(); ++w)
      for (size_t m : members_of[r])
        rack_votes[w][r] += votes[w][m];
  }
  const auto rack_of_window = greedy(all, rack_votes, rack_room);
  std::vector<std::vector<int64_t>> out(members);
  for (size_t r = 0; r < racks.size(); ++r) {
    std::vector<int64_t> mine;
    for (size_t w = 0; w < all.size(); ++w)
      if (rack_of_window[w] == int64_t(r))
        mine.push_back(int64_t(w));
    std::vector<std::vector<double>> member_votes(votes.size());
    for (int64_t w : mine)
      for (size_t m : members_of[r])
        member_votes[size_t(w)].push_back(votes[size_t(w)][m]);
    const auto member_of = greedy(
      mine, member_votes,
      std::vector<int64_t>(members_of[r].size(), per_member));
    for (size_t i = 0; i < mine.size(); ++i)
      out[members_of[r][size_t(member_of[i])]].push_back(mine[i]);
  }
  return out;
}

} // namespace tutti::data
