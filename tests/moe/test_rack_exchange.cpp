// The rack-aware all-to-all (moe/rack_exchange.hpp) against the flat one
// on in-process groups: for random row counts (zeros included), racks that
// are uneven and not contiguous in member order, and tokens chosen several
// times per rack, the dispatch and both relayed directions leave exactly
// the receive buffer of the flat all_to_all_v (rows relayed back on the
// counts of the exchange out return as sent; a dispatch told its counts by
// the exchange lands the same rows), and the dispatch sends each
// token across a rack boundary once (bytes counted exactly).

#include <catch2/catch.hpp>

#include <random>
#include <set>
#include <thread>

#include "memory_group.hpp"
#include "tutti/comm/memory_communicator.hpp"
#include "tutti/moe/rack_exchange.hpp"

using namespace tutti;
using moe::relay_direction;

namespace {

constexpr int64_t d = 8;

// What one member sends: rows by member, each row a copy of one token.
struct member_rows {
  std::vector<float> tokens;       // [n, d]
  std::vector<int64_t> row_token;  // per row, packed by member
  std::vector<int64_t> send_rows;  // per member
  std::vector<float> rows;         // the rows themselves
};

member_rows random_rows(int64_t me, int64_t P, std::mt19937& rng) {
  member_rows m;
  const int64_t n = 5 + rng() % 6;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < d; ++j)
      m.tokens.push_back(float(me * 1000 + t * 10 + j));
  for (int64_t p = 0; p < P; ++p) {
    // Row counts 0..n, tokens ascending as a dispatch orders them, a
    // token repeated when it chose two experts of one member.
    const int64_t rows = rng() % (n + 1);
    m.send_rows.push_back(rows);
    for (int64_t r = 0; r < rows; ++r)
      m.row_token.push_back(int64_t(rng() % n));
  }
  for (auto t : m.row_token)
    for (int64_t j = 0; j < d; ++j)
      m.rows.push_back(m.tokens[t * d + j]);
  return m;
}

template <class Body>
void on_group(int P, Body body) {
  tutti::testing::on_memory_group("rack", P, body);
}

} // namespace

TEST_CASE("rack all-to-all leaves what the flat one does", "[unit]") {
  for (const std::vector<int64_t>& racks :
       {std::vector<int64_t>{0, 0, 1, 1}, std::vector<int64_t>{0, 1, 0, 1, 2, 2},
        std::vector<int64_t>{0, 1, 1, 1, 0}}) {
    const int P = int(racks.size());
    INFO(P << " members");
    moe::rack_layout layout(racks);
    int64_t flat_total = 0, rack_total = 0;
    for (int seed = 0; seed < 5; ++seed) {
      std::vector<member_rows> all;
      std::mt19937 rng(seed);
      for (int r = 0; r < P; ++r)
        all.push_back(random_rows(r, P, rng));
      std::vector<int64_t> inter_flat(P, 0), inter_rack(P, 0), expected(P, 0);
      on_group(P, [&](int me, comm::communicator& c) -> std::string {
        const auto& m = all[me];
        std::vector<int64_t> recv_rows(P);
        for (int s = 0; s < P; ++s)
          recv_rows[s] = all[s].send_rows[me];
        int64_t got = 0;
        for (auto r : recv_rows)
          got += r;
        auto times_d = [](std::vector<int64_t> v) {
          for (auto& x : v)
            x *= d;
          return v;
        };
        std::vector<float> flat(got * d + 1, -1.f), rack(got * d + 1, -1.f);
        auto s = c.all_to_all_v(m.rows.data(), times_d(m.send_rows),
                                flat.data(), times_d(recv_rows),
                                sizeof(float));
        if (!s.ok())
          return s.message();
        moe::staged_collectives coll(kernels::cpu_stream());
        moe::rack_exchange x(layout, kernels::cpu_stream());
        s = x.dispatch(c, coll, m.tokens.data(), d, m.row_token, m.send_rows,
                       rack.data(), recv_rows);
        if (!s.ok())
          return s.message();
        if (rack != flat)
          return "dispatch differs from the flat exchange";
        // The same dispatch learning what it receives from the exchange,
        // with three values of each member's riding in its counts.
        std::vector<int64_t> also = {me, 10 * me, -me};
        std::vector<float> landed(got * d + 1, -1.f);
        std::vector<int64_t> told;
        x.reset_bytes(); // the bytes below are this dispatch's (the same)
        s = x.dispatch(c, coll, m.tokens.data(), d, m.row_token, m.send_rows,
                       also,
                       [&](const std::vector<int64_t>& rows)
                         -> tutti::expected<float*> {
                         told = rows;
                         return landed.data();
                       });
        if (!s.ok())
          return s.message();
        if (told != recv_rows || landed != flat)
          return "dispatch sharing counts differs from the flat exchange";
        for (int p = 0; p < P; ++p)
          if (also[3 * p] != p || also[3 * p + 1] != 10 * p
              || also[3 * p + 2] != -p)
            return "values shared with the counts differ";
        // Across racks: each token once per rack, with one int32 of
        // instructions per row it stands for.
        std::vector<std::set<int64_t>> tokens(layout.racks());
        int64_t at = 0;
        for (int p = 0; p < P; ++p)
          for (int64_t k = 0; k < m.send_rows[p]; ++k)
            tokens[layout.rack_of(p)].insert(m.row_token[at++]);
        for (int64_t rack = 0; rack < layout.racks(); ++rack)
          if (rack != layout.rack_of(me))
            expected[me] += int64_t(tokens[rack].size()) * d * 4;
        for (int p = 0; p < P; ++p)
          if (layout.rack_of(p) != layout.rack_of(me)) {
            inter_flat[me] += m.send_rows[p] * d * 4;
            expected[me] += m.send_rows[p] * 4;
            inter_rack[me] += x.bytes_to()[p];
          }
        for (auto dir : {moe::relay_direction::out_of_origin,
                         moe::relay_direction::back_to_origin}) {
          std::fill(rack.begin(), rack.end(), -1.f);
          s = x.relayed(c, coll, dir, m.rows.data(), m.send_rows, rack.data(),
                        recv_rows, d);
          if (!s.ok())
            return s.message();
          if (rack != flat)
            return "relayed exchange differs from the flat one";
        }
        // What came out of origin goes back to it on the same counts,
        // transposed, without sharing them again.
        s = x.relayed(c, coll, moe::relay_direction::out_of_origin, m.rows.data(),
                      m.send_rows, rack.data(), recv_rows, d);
        if (!s.ok())
          return s.message();
        std::vector<float> home(m.rows.size(), -1.f);
        s = x.relayed_back(c, coll, rack.data(), recv_rows, home.data(),
                           m.send_rows, d);
        if (!s.ok())
          return s.message();
        if (home != m.rows)
          return "rows relayed back differ from those sent";
        return {};
      });
      CHECK(inter_rack == expected);
      for (int r = 0; r < P; ++r) {
        flat_total += inter_flat[r];
        rack_total += inter_rack[r];
      }
    }
    // Tokens repeat within a rack here (d = 8 floats a row, 4 bytes of
    // instructions): the dedup pays over the seeds.
    INFO("cross-rack bytes " << rack_total << " vs flat " << flat_total);
    CHECK(rack_total < flat_total);
  }
}

TEST_CASE("relays: own member at home, spread across the other racks",
          "[unit]") {
  moe::rack_layout layout({0, 0, 1, 1, 1});
  CHECK(layout.racks() == 2);
  CHECK(layout.relay(1, 0) == 1);
  CHECK(layout.relay(0, 1) == 2);
  CHECK(layout.relay(1, 1) == 3);
  CHECK(layout.relay(4, 0) == 0); // position 2 in its rack, modulo 2
  CHECK(layout.relay(3, 0) == 1);
}
