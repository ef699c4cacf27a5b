// Prefix caching: a request whose prompt starts with blocks another request
// filled takes those blocks (shared, reference-counted) instead of
// computing them, and yields exactly the tokens and log-probabilities it
// yields without the cache; cached blocks no one holds count as free and
// are evicted oldest first when the cache needs room.

#include <catch2/catch.hpp>

#include <random>

#include "scheduler_harness.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

serve::served_model prefix_model() {
  return random_served_model("serve_prefix_model",
                             serve_test_config(64, 32, 48, 2, 4, 2, 4, 2, 128),
                             23);
}

using outcome = scheduler_outcome;

// The scheduler with prefix caching on or off; a request with a
// temperature samples with its id for the seed.
struct harness : scheduler_harness {
  harness(const serve::served_model& m, int64_t blocks, bool prefix_caching)
    : scheduler_harness(m, blocks, {48, 8, prefix_caching}) {}

  void add(uint64_t id, std::vector<int32_t> prompt, int64_t max_tokens,
           double temperature = 0.0) {
    serve::sampling_params p;
    p.temperature = temperature;
    p.seed = id;
    scheduler_harness::add(id, std::move(prompt), max_tokens, p);
  }

  void run_to_end() { scheduler_harness::run_to_end(10000); }
};

// `n` tokens of the model's vocabulary (64), drawn from `seed`.
std::vector<int32_t> tokens(uint32_t seed, int64_t n) {
  return random_prompt(seed, n, 64);
}

std::vector<int32_t> concat(std::vector<int32_t> a,
                            const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// What `prompt` yields with no prefix cache.
outcome uncached(const serve::served_model& m, const std::vector<int32_t>& p,
                 int64_t max_tokens, double temperature = 0.0,
                 uint64_t id = 1) {
  harness h(m, 256, false);
  h.add(id, p, max_tokens, temperature);
  h.run_to_end();
  CHECK(h.sched.prefix_hit_tokens() == 0);
  return h.results[id];
}

} // namespace

TEST_CASE("a request sharing a prefix reuses its blocks and yields the same "
          "tokens",
          "[unit]") {
  const auto m = prefix_model();
  const auto shared = tokens(1, 40); // 10 blocks of 4
  const auto a = concat(shared, tokens(2, 3));
  const auto b = concat(shared, tokens(3, 5));
  harness h(m, 256, true);
  h.add(1, a, 12);
  h.run_to_end();
  CHECK(h.sched.prefix_hit_tokens() == 0);
  CHECK(h.cache.used_blocks() == 0);
  CHECK(h.cache.cached_blocks() > 10);

  h.add(2, b, 12, 0.8); // seeded sampling too
  h.run_to_end();
  CHECK(h.sched.prefix_hit_tokens() == 40);
  const auto want_b = uncached(m, b, 12, 0.8, 2);
  CHECK(h.results[2].tokens == want_b.tokens);
  CHECK(h.results[2].logprobs == want_b.logprobs);

  // The same prompt again: every full block but the one holding its last
  // token (whose logits are needed) comes from the cache.
  h.add(3, a, 12);
  h.run_to_end();
  CHECK(h.sched.prefix_hit_tokens() == 40 + 40);
  CHECK(h.results[3].tokens == h.results[1].tokens);
  CHECK(h.results[3].logprobs == h.results[1].logprobs);
  CHECK(h.cache.used_blocks() == 0);
}

TEST_CASE("requests sharing a prefix at once hold the same blocks", "[unit]") {
  const auto m = prefix_model();
  const auto shared = tokens(4, 32);
  harness h(m, 256, true);
  h.add(1, concat(shared, tokens(5, 2)), 16);
  REQUIRE(h.sched.step().ok()); // 34 prompt tokens in one chunk of 48
  // Requests 2..6 join while 1 decodes; 1's 8 full blocks are theirs too.
  for (uint64_t id = 2; id <= 6; ++id)
    h.add(id, concat(shared, tokens(static_cast<uint32_t>(10 + id), 6)), 10,
          id % 2 ? 0.7 : 0.0);
  REQUIRE(h.sched.step().ok());
  CHECK(h.sched.prefix_hit_tokens() == 5 * 32);
  // 1's blocks, plus for each of the five its own 2 blocks: the shared 8 are
  // held once.
  CHECK(h.cache.used_blocks() < 9 + 5 * 10);
  h.run_to_end();
  for (uint64_t id = 2; id <= 6; ++id) {
    INFO("request " << id);
    const auto want = uncached(
      m, concat(shared, tokens(static_cast<uint32_t>(10 + id), 6)), 10,
      id % 2 ? 0.7 : 0.0, id);
    CHECK(h.results[id].tokens == want.tokens);
    CHECK(h.results[id].logprobs == want.logprobs);
  }
  CHECK(h.cache.used_blocks() == 0);
}

TEST_CASE("cached blocks are evicted oldest first when the cache needs room",
          "[unit]") {
  const auto m = prefix_model();
  const auto first = tokens(6, 24), second = tokens(7, 24);
  harness h(m, 16, true); // 64 positions in all
  h.add(1, first, 8);
  h.run_to_end();
  h.add(2, second, 8);
  h.run_to_end();
  CHECK(h.cache.free_blocks() == 16);
  // A request needing 13 blocks evicts what it must: the oldest (first's).
  h.add(3, tokens(8, 44), 8);
  h.run_to_end();
  CHECK(h.results[3].finish == serve::finish_reason::length);
  // 2 free blocks, then first's 7 cached ones, then second's last 4 (a
  // sequence's blocks leave the LRU list last block first): second keeps its
  // leading 3.
  CHECK(h.cache.match_prefix(first.data(), 24) == 0);
  CHECK(h.cache.match_prefix(second.data(), 24) == 3);
  h.add(4, second, 8);
  h.add(5, first, 8);
  h.run_to_end();
  CHECK(h.results[4].tokens == h.results[2].tokens);
  CHECK(h.results[5].tokens == h.results[1].tokens);
  CHECK(h.results[5].logprobs == h.results[1].logprobs);
  CHECK(h.cache.used_blocks() == 0);
}

TEST_CASE("the KV cache shares registered blocks by reference count",
          "[unit]") {
  serve::kv_cache c({1, 1, 2, 2}, 4);
  const std::vector<int32_t> t = {5, 6, 7, 8, 9};
  std::vector<int32_t> a;
  REQUIRE(c.reserve(a, 5)); // 3 blocks
  uint64_t h = 0;
  h = c.register_block(a[0], h, t.data());
  h = c.register_block(a[1], h, t.data() + 2);
  CHECK(c.cached_blocks() == 2);
  std::vector<int32_t> b;
  uint64_t hb = 0;
  CHECK(c.match_prefix(t.data(), 5, &b, &hb) == 2);
  CHECK(hb == h);
  CHECK(b == std::vector<int32_t>{a[0], a[1]});
  // Never the block with the last token: its logits are needed.
  CHECK(c.match_prefix(t.data(), 4) == 1);
  // A different token anywhere in a block breaks the match there.
  const std::vector<int32_t> u = {5, 6, 7, 0, 9};
  CHECK(c.match_prefix(u.data(), 5) == 1);
  c.release(a);
  CHECK(c.used_blocks() == 2); // b still holds the shared two
  c.release(b);
  CHECK(c.used_blocks() == 0);
  CHECK(c.free_blocks() == 4);
  CHECK(c.cached_blocks() == 2);
  // Taking all four evicts the cached ones.
  std::vector<int32_t> d;
  REQUIRE(c.reserve(d, 8));
  CHECK(c.cached_blocks() == 0);
  CHECK(c.match_prefix(t.data(), 5) == 0);
}
