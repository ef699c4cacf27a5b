// The rack relays' combine and backward exchanges (model/rack_combine.cpp,
// rack_plan.hpp) against the flat all-to-all and the home's own kernels,
// on in-process groups: for top-2, top-3 and top-4 routing with dropped
// slots, racks uneven and not contiguous in member order, and values over
// six decades (so a sum in another order would show), the combined output,
// the rows' gradients at the experts, the gate gradients and the tokens'
// input gradients are the flat path's bits. The combine sends back one row
// per group (a token's leading run of two or more slots in one remote
// rack) and one per other row: the cross-rack bytes are counted exactly.

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "memory_group.hpp"
#include "tutti/comm/memory_communicator.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/moe/rack_exchange.hpp"

using namespace tutti;
namespace k = tutti::kernels;

namespace {

constexpr int64_t d = 6, L = 2; // hidden size, experts per member

// One member's routed tokens.
struct member_batch {
  int64_t n = 0;
  std::vector<float> x, dout, gate; // [n, d], [n, d], [n * K]
  std::vector<int32_t> topk, slot_of_row;
  std::vector<int64_t> send_rows; // per member
};

float wide(std::mt19937& rng) {
  std::uniform_real_distribution<float> mant(-1.f, 1.f);
  std::uniform_int_distribution<int> exp10(-3, 3);
  return mant(rng) * std::pow(10.f, float(exp10(rng)));
}

member_batch random_batch(int64_t P, int64_t K, std::mt19937& rng) {
  member_batch b;
  const int64_t E = P * L;
  b.n = 4 + int64_t(rng() % 9);
  for (int64_t i = 0; i < b.n * d; ++i) {
    b.x.push_back(wide(rng));
    b.dout.push_back(wide(rng));
  }
  std::uniform_real_distribution<float> g(0.01f, 1.f);
  for (int64_t t = 0; t < b.n; ++t) {
    std::vector<int32_t> experts(E);
    for (int64_t e = 0; e < E; ++e)
      experts[e] = int32_t(e);
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t q = 0; q < K; ++q) {
      b.topk.push_back(rng() % 7 == 0 ? -1 : experts[q]); // some dropped
      b.gate.push_back(g(rng));
    }
  }
  std::vector<int64_t> counts(E);
  b.slot_of_row.resize(b.n * K);
  const int64_t rows = k::permute_plan(k::cpu_stream(), b.topk.data(), b.n, E,
                                       K, b.slot_of_row.data(), counts.data());
  b.slot_of_row.resize(rows);
  b.send_rows.assign(P, 0);
  for (int64_t e = 0; e < E; ++e)
    b.send_rows[e / L] += counts[e];
  return b;
}

// The expert: any function of its input row, here a row-dependent affine map.
std::vector<float> expert(const std::vector<float>& in, float scale) {
  std::vector<float> out(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    out[i] = in[i] * (scale + 0.25f * float(i % d)) - 0.5f * float(i / d % 3);
  return out;
}

template <class Body>
void on_group(int P, Body body) {
  tutti::testing::on_memory_group("rack_combine", P, body);
}

std::vector<int64_t> times_d(std::vector<int64_t> v) {
  for (auto& x : v)
    x *= d;
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size()
         && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What member `me`'s rows should cost across racks, counted here from the
// rule (a group: a token's leading run of two or more kept slots in one
// remote rack): its rows in remote racks, the rows that come back from
// there (less the groups' followers), and its tokens per remote rack.
struct cross_rows {
  int64_t remote = 0, back = 0, tokens = 0;
  int64_t shared = 0;  // remote rows of tokens with two or more there
  int64_t grouped = 0; // the groups' rows
};

cross_rows expected_cross(const member_batch& b, const moe::rack_layout& x,
                          int64_t me, int64_t K) {
  std::vector<int64_t> member_of_slot(b.n * K, -1);
  int64_t r = 0;
  for (int64_t p = 0; p < x.members(); ++p)
    for (int64_t i = 0; i < b.send_rows[p]; ++i, ++r)
      member_of_slot[b.slot_of_row[r]] = p;
  cross_rows c;
  const int64_t mine = x.rack_of(me);
  for (int64_t t = 0; t < b.n; ++t) {
    std::vector<int64_t> seen(x.racks(), 0);
    int64_t run_rack = -1, run = 0;
    bool open = true;
    for (int64_t q = 0; q < K; ++q) {
      const int64_t p = member_of_slot[t * K + q];
      if (p < 0)
        continue;
      const int64_t rack = x.rack_of(p);
      if (rack != mine) {
        ++c.remote;
        c.tokens += seen[rack] ? 0 : 1;
        ++seen[rack];
      }
      if (run == 0)
        run_rack = rack;
      if (open && rack == run_rack)
        ++run;
      else
        open = false;
    }
    if (run >= 2 && run_rack != mine) {
      c.back -= run - 1;
      c.grouped += run;
    }
    for (int64_t n : seen)
      c.shared += n > 1 ? n : 0;
  }
  c.back += c.remote;
  return c;
}

} // namespace

TEST_CASE("rack relays: combine and backward are the flat path's bits",
          "[unit]") {
  for (const std::vector<int64_t>& racks :
       {std::vector<int64_t>{0, 0, 1, 1},
        std::vector<int64_t>{0, 1, 0, 1, 2, 2},
        std::vector<int64_t>{0, 1, 1, 1, 0}})
    for (int64_t K : {2, 3, 4}) {
      const int P = int(racks.size());
      INFO(P << " members, top-" << K);
      const moe::rack_layout layout(racks);
      int64_t groups = 0, flat_back = 0, rack_back = 0;
      for (int seed = 0; seed < 4; ++seed) {
        std::mt19937 rng(unsigned(seed * 31 + K));
        std::vector<member_batch> all;
        for (int r = 0; r < P; ++r)
          all.push_back(random_batch(P, K, rng));
        std::vector<int64_t> group_count(P, 0);
        // Cross-rack bytes sent by each member, per exchange (combine,
        // output gradient, input gradients, dispatch), and expected by
        // each home.
        std::vector<std::array<int64_t, 4>> sent_cross(P), expected(P);
        std::vector<int64_t> remote(P, 0), back(P, 0);
        on_group(P, [&](int me, comm::communicator& c) -> std::string {
          const auto& b = all[me];
          const auto& s = k::cpu_stream();
          const int64_t rows = int64_t(b.slot_of_row.size());
          std::vector<int64_t> recv_rows(P);
          for (int h = 0; h < P; ++h)
            recv_rows[h] = all[h].send_rows[me];
          int64_t got = 0;
          for (auto r : recv_rows)
            got += r;
          auto cross = [&](const std::vector<int64_t>& bytes_to) {
            int64_t sum = 0;
            for (int p = 0; p < P; ++p)
              if (layout.rack_of(p) != layout.rack_of(me))
                sum += bytes_to[p];
            return sum;
          };
          // The flat path: rows out, experts, rows back, home's kernels.
          std::vector<float> sent(rows * d + 1), in_flat(got * d + 1);
          k::permute_rows(s, b.x.data(), b.slot_of_row.data(), sent.data(),
                          rows, K, d);
          auto st = c.all_to_all_v(sent.data(), times_d(b.send_rows),
                                   in_flat.data(), times_d(recv_rows), 4);
          in_flat.resize(got * d);
          const auto y = expert(in_flat, 1.5f + 0.1f * float(me));
          std::vector<float> y_home(rows * d + 1), out_flat(b.n * d);
          st = c.all_to_all_v(y.data(), times_d(recv_rows), y_home.data(),
                              times_d(b.send_rows), 4);
          k::unpermute_combine(s, y_home.data(), b.slot_of_row.data(),
                               b.gate.data(), out_flat.data(), rows, b.n, K, d);
          std::vector<float> dy(rows * d + 1), dgate_flat(b.n * K),
            dy_in_flat(got * d + 1);
          k::unpermute_combine_backward(
            s, b.dout.data(), y_home.data(), b.slot_of_row.data(),
            b.gate.data(), dy.data(), dgate_flat.data(), rows, b.n, K, d);
          st = c.all_to_all_v(dy.data(), times_d(b.send_rows),
                              dy_in_flat.data(), times_d(recv_rows), 4);
          dy_in_flat.resize(got * d);
          const auto dx = expert(dy_in_flat, 0.75f);
          std::vector<float> dx_home(rows * d + 1), dtok_flat(b.n * d, 0.f);
          st = c.all_to_all_v(dx.data(), times_d(recv_rows), dx_home.data(),
                              times_d(b.send_rows), 4);
          k::permute_rows_backward(s, dx_home.data(), b.slot_of_row.data(),
                                   dtok_flat.data(), rows, K, d);
          if (!st.ok())
            return st.message();

          // Through the relays.
          moe::staged_collectives coll(s);
          moe::rack_exchange x(layout, s);
          moe::relay_plan plan;
          std::vector<int64_t> row_slot(b.slot_of_row.begin(),
                                        b.slot_of_row.end());
          std::vector<float> in_rack(got * d + 1);
          st = x.dispatch(c, coll, b.x.data(), b.n, d, K, row_slot,
                          b.gate.data(), b.send_rows, in_rack.data(), recv_rows,
                          plan);
          if (!st.ok())
            return st.message();
          sent_cross[me][3] = cross(x.bytes_to());
          in_rack.resize(got * d);
          if (!same_bits(in_rack, in_flat))
            return "dispatch differs from the flat one";
          group_count[me] = plan.groups;
          std::vector<float> y_rack(rows * d + 1), out_rack(b.n * d);
          x.reset_bytes();
          st = x.combine(c, coll, plan, moe::combine_kind::outputs, y.data(),
                         recv_rows, y_rack.data(), b.send_rows, nullptr, d);
          if (!st.ok())
            return st.message();
          sent_cross[me][0] = cross(x.bytes_to());
          auto gate = b.gate;
          moe::combine_gates(plan, gate);
          k::unpermute_combine(s, y_rack.data(), b.slot_of_row.data(),
                               gate.data(), out_rack.data(), rows, b.n, K, d);
          if (!same_bits(out_rack, out_flat))
            return "combined output differs from the flat one";
          // The home's own backward of what the combine left, then the
          // relays'.
          std::vector<float> dy_rack(rows * d + 1), dgate_rack(b.n * K),
            dy_in_rack(got * d + 1);
          k::unpermute_combine_backward(
            s, b.dout.data(), y_rack.data(), b.slot_of_row.data(),
            b.gate.data(), dy_rack.data(), dgate_rack.data(), rows, b.n, K, d);
          x.reset_bytes();
          st = x.dispatch_gradient(c, coll, plan, b.dout.data(), dy_rack.data(),
                                   dy_in_rack.data(), recv_rows, d);
          if (!st.ok())
            return st.message();
          sent_cross[me][1] = cross(x.bytes_to());
          dy_in_rack.resize(got * d);
          if (!same_bits(dy_in_rack, dy_in_flat))
            return "rows' gradients differ from the flat ones";
          const auto dx_rack = expert(dy_in_rack, 0.75f);
          std::vector<float> dx_home_rack(rows * d + 1),
            dtok_rack(b.n * d, 0.f);
          x.reset_bytes();
          st = x.combine(c, coll, plan, moe::combine_kind::input_gradients,
                         dx_rack.data(), recv_rows, dx_home_rack.data(),
                         b.send_rows, dgate_rack.data(), d);
          if (!st.ok())
            return st.message();
          sent_cross[me][2] = cross(x.bytes_to());
          k::permute_rows_backward(s, dx_home_rack.data(), b.slot_of_row.data(),
                                   dtok_rack.data(), rows, K, d);
          if (!same_bits(dgate_rack, dgate_flat))
            return "gate gradients differ from the flat ones";
          if (!same_bits(dtok_rack, dtok_flat))
            return "input gradients differ from the flat ones";
          const auto e = expected_cross(b, layout, me, K);
          expected[me] = {e.back * d * 4, e.tokens * d * 4,
                          e.back * d * 4 + e.grouped * 4,
                          e.tokens * d * 4 + (e.remote + e.shared) * 4};
          remote[me] = e.remote;
          back[me] = e.back;
          return {};
        });
        // Relays send what their homes get: the sums match exactly.
        std::array<int64_t, 4> sent{}, want{};
        for (int r = 0; r < P; ++r) {
          groups += group_count[r];
          flat_back += remote[r];
          rack_back += back[r];
          for (int i = 0; i < 4; ++i)
            sent[i] += sent_cross[r][i], want[i] += expected[r][i];
        }
        CHECK(sent == want);
      }
      INFO("groups " << groups << ", rows back across racks " << rack_back
                     << " vs flat " << flat_back);
      CHECK(groups > 0);
      CHECK(rack_back < flat_back);
    }
}
