#include "tutti/moe/rack_plan.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "tutti/moe/rack_rows.hpp"
#include "tutti/moe/rack_exchange.hpp"

namespace tutti::moe {

using rack_rows::starts;

std::vector<std::vector<int64_t>> unique_by_rack(
  const rack_layout& layout, const std::vector<int64_t>& row_token,
  const std::vector<int64_t>& send_rows) {
  const auto from = starts(send_rows);
  std::vector<std::vector<int64_t>> unique(layout.racks());
  for (int64_t p = 0; p < layout.members(); ++p) {
    auto& u = unique[layout.rack_of(p)];
    u.insert(u.end(), row_token.begin() + from[p],
             row_token.begin() + from[p + 1]);
  }
  for (auto& u : unique) {
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
  }
  return unique;
}

int32_t relay_code(int64_t pos, int64_t rank, int64_t k, bool grouped) {
  return static_cast<int32_t>((pos * k + rank) * 2 + (grouped ? 1 : 0));
}

void relay_decode(int32_t code, int64_t k, int64_t& pos, int64_t& rank,
                  bool& grouped) {
  grouped = (code & 1) != 0;
  const int64_t slot = code >> 1;
  pos = slot / k;
  rank = slot % k;
}

void plan_home(relay_plan& plan, const rack_layout& layout, int64_t me) {
  const int64_t P = layout.members(), R = layout.racks(), K = plan.k;
  const int64_t rows = int64_t(plan.row_slot.size()), mine = layout.rack_of(me);
  const auto from = starts(plan.send_rows);
  std::vector<int64_t> rack_of_row(rows), row_token(rows);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = from[p]; i < from[p + 1]; ++i)
      rack_of_row[i] = layout.rack_of(p);
  std::vector<int64_t> row_of_slot(plan.tokens * K, -1);
  for (int64_t i = 0; i < rows; ++i) {
    row_of_slot[plan.row_slot[i]] = i;
    row_token[i] = plan.row_slot[i] / K;
  }
  // Each token's rows per rack (shared: two or more), and its leading run
  // of rows (slot order) in one rack.
  plan.role.assign(rows, row_role::single);
  plan.shared.assign(rows, 0);
  std::vector<int64_t> group_rack(plan.tokens, -1), lead_row(plan.tokens, -1);
  std::vector<int64_t> run, in_rack(R);
  for (int64_t t = 0; t < plan.tokens; ++t) {
    run.clear();
    std::fill(in_rack.begin(), in_rack.end(), 0);
    bool open = true;
    for (int64_t q = 0; q < K; ++q) {
      const int64_t i = row_of_slot[t * K + q];
      if (i < 0)
        continue; // dropped: adds nothing
      ++in_rack[rack_of_row[i]];
      if (!run.empty() && rack_of_row[i] != rack_of_row[run[0]])
        open = false;
      if (open)
        run.push_back(i);
    }
    for (int64_t q = 0; q < K; ++q)
      if (const int64_t i = row_of_slot[t * K + q]; i >= 0)
        plan.shared[i] = in_rack[rack_of_row[i]] > 1 ? 1 : 0;
    if (run.size() < 2 || rack_of_row[run[0]] == mine)
      continue;
    group_rack[t] = rack_of_row[run[0]];
    lead_row[t] = run[0];
    plan.role[run[0]] = row_role::lead;
    for (size_t j = 1; j < run.size(); ++j)
      plan.role[run[j]] = row_role::follower;
  }
  plan.unique = unique_by_rack(layout, row_token, plan.send_rows);
  plan.alone_row.assign(R, {});
  plan.shared_rows.assign(R, 0);
  for (int64_t r = 0; r < R; ++r)
    plan.alone_row[r].assign(plan.unique[r].size(), -1);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = rack_of_row[i];
    if (plan.shared[i]) {
      ++plan.shared_rows[r];
      continue;
    }
    const auto& u = plan.unique[r];
    plan.alone_row[r][std::lower_bound(u.begin(), u.end(), row_token[i])
                      - u.begin()] = i;
  }
  // What comes back from each relay: its singles owner by owner, then its
  // groups by token; gate gradients for the groups' rows, owner by owner.
  plan.from_relay_rows.assign(P, 0);
  plan.from_relay_slots.assign(P, 0);
  plan.land_row.clear();
  plan.land_slot.clear();
  for (int64_t v = 0; v < P; ++v) {
    const int64_t rack = layout.rack_of(v);
    if (layout.relay(me, rack) != v)
      continue;
    for (int64_t p : layout.in_rack(rack))
      for (int64_t i = from[p]; i < from[p + 1]; ++i)
        if (plan.role[i] == row_role::single) {
          plan.land_row.push_back(i);
          ++plan.from_relay_rows[v];
        } else {
          plan.land_slot.push_back(plan.row_slot[i]);
          ++plan.from_relay_slots[v];
        }
    for (int64_t t : plan.unique[rack])
      if (group_rack[t] == rack)
        plan.land_row.push_back(lead_row[t]), ++plan.from_relay_rows[v];
  }
}

void plan_relay(relay_plan& plan, const rack_layout& layout, int64_t me,
                const std::vector<int32_t>& meta,
                const std::vector<int64_t>& meta_at,
                const std::vector<int64_t>& gates_at,
                const std::vector<int64_t>& tokens_from) {
  const int64_t P = layout.members(), K = plan.k, mine = layout.rack_of(me);
  const auto& owners = layout.in_rack(mine);
  auto served = [&](int64_t h) { return layout.relay(h, mine) == me; };
  const auto token_at = starts(tokens_from);
  plan.tokens_from = tokens_from;
  plan.tokens_in = token_at.back();
  plan.vgate.assign(plan.tokens_in * K, 1.0f);
  // Each home's rows in its order (owner, then row): token, rank, grouped;
  // then the shared ones' gates, in the same order.
  std::vector<int64_t> row_u, row_rank;
  std::vector<char> row_grouped;
  std::vector<int64_t> home_first(P + 1, 0); // rows of home h, in row_u
  std::vector<int64_t> uses(plan.tokens_in, 0);
  for (int64_t h = 0; h < P; ++h) {
    home_first[h] = int64_t(row_u.size());
    if (!served(h))
      continue;
    for (int64_t o : owners)
      for (int64_t i = 0; i < plan.counts[h * P + o]; ++i) {
        int64_t pos = 0, rank = 0;
        bool grouped = false;
        relay_decode(meta[size_t(meta_at[h * P + o] + i)], K, pos, rank,
                     grouped);
        row_u.push_back(token_at[h] + pos);
        row_rank.push_back(rank);
        row_grouped.push_back(grouped ? 1 : 0);
        ++uses[token_at[h] + pos];
      }
    int64_t gate_word = gates_at[h];
    for (int64_t j = home_first[h]; j < int64_t(row_u.size()); ++j)
      if (uses[row_u[j]] > 1) {
        float gate = 0;
        std::memcpy(&gate, &meta[size_t(gate_word++)], sizeof(gate));
        plan.vgate[row_u[j] * K + row_rank[j]] = gate;
      }
  }
  home_first[P] = int64_t(row_u.size());
  // Relay rows: by owner, then home, then the home's order.
  std::vector<int64_t> relay_of(row_u.size());
  plan.block_at.assign(P * P, 0);
  int64_t next = 0;
  {
    std::vector<int64_t> at = home_first; // walks each home's rows
    for (int64_t o : owners)
      for (int64_t h = 0; h < P; ++h) {
        if (!served(h))
          continue;
        plan.block_at[o * P + h] = next;
        for (int64_t i = 0; i < plan.counts[h * P + o]; ++i)
          relay_of[at[h]++] = next++;
      }
  }
  plan.relay_rows = next;
  std::vector<int64_t> u_of(next), rank_of(next);
  std::vector<char> grouped_of(next);
  for (size_t j = 0; j < row_u.size(); ++j) {
    u_of[relay_of[j]] = row_u[j];
    rank_of[relay_of[j]] = row_rank[j];
    grouped_of[relay_of[j]] = row_grouped[j];
  }
  // Groups, numbered by token (so by home, then the home's token order).
  std::vector<int64_t> group_u;
  for (int64_t r = 0; r < next; ++r)
    if (grouped_of[r])
      group_u.push_back(u_of[r]);
  std::sort(group_u.begin(), group_u.end());
  group_u.erase(std::unique(group_u.begin(), group_u.end()), group_u.end());
  plan.groups = int64_t(group_u.size());
  auto group_of = [&](int64_t u) {
    return int64_t(std::lower_bound(group_u.begin(), group_u.end(), u)
                   - group_u.begin());
  };
  plan.group_rows.clear();
  plan.group_vslot.clear();
  plan.group_slot.clear();
  plan.other_rows.clear();
  plan.other_vslot.clear();
  plan.group_gate.assign(plan.groups * K, 0.0f);
  std::vector<int64_t> place_in_group(next, -1);
  for (int64_t r = 0; r < next; ++r) {
    const auto vslot = static_cast<int32_t>(u_of[r] * K + rank_of[r]);
    if (!grouped_of[r]) {
      plan.other_rows.push_back(r);
      plan.other_vslot.push_back(vslot);
      continue;
    }
    const int64_t g = group_of(u_of[r]);
    place_in_group[r] = int64_t(plan.group_rows.size());
    plan.group_rows.push_back(r);
    plan.group_vslot.push_back(vslot);
    plan.group_slot.push_back(static_cast<int32_t>(g * K + rank_of[r]));
    plan.group_gate[g * K + rank_of[r]] = plan.vgate[vslot];
  }
  // The rows' gradients: the groups' rows, then the others.
  plan.gradient_at.assign(next, 0);
  for (size_t j = 0; j < plan.group_rows.size(); ++j)
    plan.gradient_at[plan.group_rows[j]] = int64_t(j);
  for (size_t j = 0; j < plan.other_rows.size(); ++j)
    plan.gradient_at[plan.other_rows[j]] = int64_t(plan.group_rows.size() + j);
  // Stage two: each home's singles owner by owner, then its group sums
  // (after the relay rows); the gate gradients of its groups' rows.
  plan.to_home_rows.assign(P, 0);
  plan.to_home_slots.assign(P, 0);
  plan.out_index.clear();
  plan.slot_index.clear();
  for (int64_t h = 0; h < P; ++h) {
    if (!served(h))
      continue;
    for (int64_t o : owners)
      for (int64_t i = 0; i < plan.counts[h * P + o]; ++i) {
        const int64_t r = plan.block_at[o * P + h] + i;
        if (grouped_of[r]) {
          plan.slot_index.push_back(place_in_group[r]);
          ++plan.to_home_slots[h];
        } else {
          plan.out_index.push_back(r);
          ++plan.to_home_rows[h];
        }
      }
    for (int64_t g = group_of(token_at[h]);
         g < plan.groups && group_u[g] < token_at[h + 1]; ++g)
      plan.out_index.push_back(next + g), ++plan.to_home_rows[h];
  }
}

void combine_gates(const relay_plan& plan, std::vector<float>& gate) {
  for (size_t i = 0; i < plan.role.size(); ++i)
    if (plan.role[i] == row_role::lead)
      gate[plan.row_slot[i]] = 1.0f;
    else if (plan.role[i] == row_role::follower)
      gate[plan.row_slot[i]] = 0.0f;
}

} // namespace tutti::moe
