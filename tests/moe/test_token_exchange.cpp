// moe::token_exchange (moe/token_exchange.hpp): the factory's choice, and
// every strategy against the others on one in-process group. For random
// routing over experts split unevenly (a member may hold none), the
// dispatch lands exactly the rows a direct computation says, in the
// experts' order, whatever the strategy (runs, flat in one or several
// chunks, rack relays); the way back returns each row to the slot it left
// from, and the gradients' dispatch lands like the dispatch. Flat and runs
// count the same bytes; a group of one moves nothing.

#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "memory_group.hpp"
#include "tutti/moe/token_exchange.hpp"

using namespace tutti;

namespace {

constexpr int64_t d = 4, k = 2;

// The memory communicator, but not in process as far as the factory can
// tell: it then chooses the flat exchange.
class looks_remote final : public comm::communicator {
public:
  explicit looks_remote(comm::communicator& c) : c_(c) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  status all_reduce_sum(float* x, size_t n) override {
    return c_.all_reduce_sum(x, n);
  }
  status all_reduce_sum(double* x, size_t n) override {
    return c_.all_reduce_sum(x, n);
  }
  status all_reduce_sum(int64_t* x, size_t n) override {
    return c_.all_reduce_sum(x, n);
  }
  status all_to_all_v(const void* s, const std::vector<int64_t>& sc, void* r,
                      const std::vector<int64_t>& rc, size_t b) override {
    return c_.all_to_all_v(s, sc, r, rc, b);
  }
  status all_to_all(const int64_t* s, int64_t* r, size_t n) override {
    return c_.all_to_all(s, r, n);
  }
  status barrier() override { return c_.barrier(); }
  status abort() override { return c_.abort(); }
  std::string describe() const override { return "remote " + c_.describe(); }

private:
  comm::communicator& c_;
};

// One member's layer: tokens, and its top-k slots in dispatch order.
struct member_layer {
  std::vector<float> tokens;        // [n, d]
  std::vector<int32_t> slot_of_row; // dispatch order
  std::vector<int64_t> expert_rows; // [E]
  std::vector<int64_t> expert_of_row;
};

member_layer random_layer(int64_t me, int64_t E, std::mt19937& rng) {
  member_layer m;
  const int64_t n = 3 + rng() % 6;
  for (int64_t i = 0; i < n * d; ++i)
    m.tokens.push_back(float(me * 1000 + i));
  std::vector<int64_t> expert(n * k);
  for (int64_t t = 0; t < n; ++t) {
    expert[t * k] = rng() % E;
    expert[t * k + 1] = (expert[t * k] + 1 + rng() % (E - 1)) % E;
  }
  m.expert_rows.assign(E, 0);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t s = 0; s < n * k; ++s)
      if (expert[s] == e) {
        m.slot_of_row.push_back(int32_t(s));
        m.expert_of_row.push_back(e);
        ++m.expert_rows[e];
      }
  return m;
}

moe::routed_rows rows_of(const member_layer& m,
                         const std::vector<int64_t>& first) {
  moe::routed_rows r;
  r.tokens = m.tokens.data();
  r.tokens_count = int64_t(m.tokens.size()) / d;
  r.d = d;
  r.k = k;
  r.slot_of_row = m.slot_of_row.data();
  r.rows = int64_t(m.slot_of_row.size());
  r.expert_rows = m.expert_rows;
  r.expert_first = first;
  return r;
}

// What member `me` should hold after the dispatch: for each of its
// experts, every member's rows of it in member order, each its token.
std::vector<float> expected_landing(const std::vector<member_layer>& all,
                                    const std::vector<int64_t>& first,
                                    int64_t me) {
  std::vector<float> out;
  for (int64_t e = first[me]; e < first[me + 1]; ++e)
    for (const auto& m : all)
      for (size_t r = 0; r < m.slot_of_row.size(); ++r)
        if (m.expert_of_row[r] == e) {
          const int64_t t = m.slot_of_row[r] / k;
          out.insert(out.end(), m.tokens.begin() + t * d,
                     m.tokens.begin() + (t + 1) * d);
        }
  return out;
}

struct outcome {
  std::string strategy;
  std::vector<float> landed, returned, gradients;
  std::vector<int64_t> bytes_to;
};

// One layer through `x`: dispatch, "experts" (2 * row + 1), the way back
// chunk by chunk, and the gradients' dispatch of the returned rows.
std::string one_layer(moe::token_exchange& x, const member_layer& m,
                      const std::vector<int64_t>& first, outcome& o) {
  o.strategy = x.strategy();
  moe::exchange_plan plan;
  kernels::tensor<float> packed;
  std::vector<float> in, out;
  moe::exchange_clock clock;
  auto s = x.dispatch(
    rows_of(m, first), plan, packed,
    [&](const moe::exchange_plan& p) -> expected<float*> {
      in.resize(p.recv_rows * d);
      return in.data();
    },
    clock);
  if (!s.ok())
    return s.message();
  o.landed = in;
  for (float v : in)
    out.push_back(2 * v + 1);
  o.returned.assign(plan.rows * d, -1);
  for (size_t c = 0; c < plan.chunks.size(); ++c)
    if (auto b = x.combine(plan, c, moe::combine_kind::outputs, out.data(),
                           o.returned.data(), nullptr, clock);
        !b.ok())
      return b.message();
  o.gradients.assign(plan.recv_rows * d, -1);
  if (auto g = x.dispatch_gradient(plan, nullptr, o.returned.data(),
                                   o.gradients.data(), clock);
      !g.ok())
    return g.message();
  o.bytes_to = x.bytes_to();
  return "";
}

} // namespace

TEST_CASE("token exchange: every strategy moves the same rows", "[unit]") {
  const std::vector<int64_t> racks = {0, 1, 0, 1};
  const std::vector<int64_t> first = {0, 3, 3, 5, 8}; // member 1 holds none
  const int P = 4;
  const int64_t E = first.back();
  for (int seed = 0; seed < 4; ++seed) {
    std::mt19937 rng(seed);
    std::vector<member_layer> all;
    for (int p = 0; p < P; ++p)
      all.push_back(random_layer(p, E, rng));
    // [member] -> outcomes in the order tried.
    std::vector<std::vector<outcome>> got(P);
    tutti::testing::on_memory_group(
      "token", P, [&](int me, comm::communicator& c) -> std::string {
        looks_remote remote(c);
        struct attempt {
          comm::communicator* group;
          moe::exchange_options options;
        };
        moe::exchange_options runs, flat1, flat3, rack;
        flat3.combine_chunks = 3;
        rack.rack_aware = true;
        rack.racks = moe::rack_layout(racks);
        for (auto [group, options] :
             {attempt{&c, runs}, attempt{&remote, flat1},
              attempt{&remote, flat3}, attempt{&c, rack}}) {
          auto x = moe::make_token_exchange(*group, kernels::cpu_stream(),
                                            options);
          if (!x.ok())
            return x.error().message();
          got[me].emplace_back();
          if (auto e = one_layer(*x.value(), all[me], first, got[me].back());
              !e.empty())
            return std::string(x.value()->strategy()) + ": " + e;
        }
        return "";
      });
    for (int me = 0; me < P; ++me) {
      INFO("seed " << seed << ", member " << me);
      const auto& o = got[me];
      REQUIRE(o.size() == 4);
      CHECK(o[0].strategy == std::string("runs"));
      CHECK(o[1].strategy == std::string("flat"));
      CHECK(o[3].strategy == std::string("rack"));
      const auto want = expected_landing(all, first, me);
      std::vector<float> back;
      for (size_t r = 0; r < all[me].slot_of_row.size(); ++r)
        for (int64_t j = 0; j < d; ++j)
          back.push_back(
            2 * all[me].tokens[(all[me].slot_of_row[r] / k) * d + j] + 1);
      for (const auto& x : o) {
        INFO(x.strategy);
        CHECK(x.landed == want);
        CHECK(x.returned == back);
      }
      // The gradients' dispatch of the returned rows lands them as the
      // dispatch landed the tokens.
      std::vector<float> twice;
      for (float v : want)
        twice.push_back(2 * v + 1);
      for (const auto& x : o)
        CHECK(x.gradients == twice);
      // Rows only, both ways, each counted once: the same on every
      // strategy but the relays, which send more inside a rack.
      CHECK(o[0].bytes_to == o[1].bytes_to);
      CHECK(o[1].bytes_to == o[2].bytes_to);
    }
  }
}

TEST_CASE("token exchange: a group of one permutes in place", "[unit]") {
  std::mt19937 rng(7);
  const auto m = random_layer(0, 6, rng);
  const std::vector<int64_t> first = {0, 6};
  tutti::testing::on_memory_group(
    "self", 1, [&](int, comm::communicator& c) -> std::string {
      auto made = moe::make_token_exchange(c, kernels::cpu_stream(), {});
      if (!made.ok())
        return made.error().message();
      auto& x = *made.value();
      if (!x.experts_order_is_dispatch_order()
          || x.strategy() != std::string("self"))
        return "not the group of one";
      moe::exchange_plan plan;
      kernels::tensor<float> unused;
      std::vector<float> rows;
      moe::exchange_clock clock;
      auto s = x.dispatch(
        rows_of(m, first), plan, unused,
        [&](const moe::exchange_plan& p) -> expected<float*> {
          rows.resize(p.recv_rows * d);
          return rows.data();
        },
        clock);
      if (!s.ok())
        return s.message();
      if (rows != expected_landing({m}, first, 0) || unused.size() != 0)
        return "dispatch";
      // In place both ways: nothing moves, the bytes are counted.
      const auto before = rows;
      for (size_t c = 0; c < plan.chunks.size(); ++c)
        if (!x.combine(plan, c, moe::combine_kind::outputs, rows.data(),
                       rows.data(), nullptr, clock)
               .ok())
          return "combine";
      if (!x.dispatch_gradient(plan, nullptr, rows.data(), rows.data(), clock)
             .ok()
          || rows != before)
        return "gradients";
      const int64_t bytes = int64_t(rows.size() * sizeof(float));
      if (x.bytes_to() != std::vector<int64_t>{3 * bytes})
        return "bytes " + std::to_string(x.bytes_to()[0]);
      return "";
    });
}

TEST_CASE("token exchange: refuses counts that do not add up", "[unit]") {
  std::mt19937 rng(3);
  auto m = random_layer(0, 4, rng);
  ++m.expert_rows[0];
  tutti::testing::on_memory_group(
    "bad", 1, [&](int, comm::communicator& c) -> std::string {
      auto x = moe::make_token_exchange(c, kernels::cpu_stream(), {});
      moe::exchange_plan plan;
      kernels::tensor<float> packed;
      moe::exchange_clock clock;
      std::vector<float> rows(64 * d);
      auto s = x.value()->dispatch(
        rows_of(m, {0, 4}), plan, packed,
        [&](const moe::exchange_plan&) -> expected<float*> {
          return rows.data();
        },
        clock);
      return s.ok() ? "accepted" : "";
    });
}
