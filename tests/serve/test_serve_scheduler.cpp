// Continuous batching: a request's tokens and log-probabilities are the same
// alone and among 31 others (greedy and seeded sampling, any arrival order;
// Mixtral and Qwen3-MoE), with prompts prefilled in chunks, and when the KV
// cache runs out and requests are preempted and recomputed. Stop sequences,
// cancellation and timeouts free their blocks. With rack affinity over several
// ranks, a request its rack has no room for starts on another rank at once.

#include <catch2/catch.hpp>

#include <random>

#include "scheduler_harness.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

using outcome = scheduler_outcome;
using harness = scheduler_harness;

serve::served_model small_model(int64_t max_seq = 96) {
  const auto dir = write_random_export(
    scratch("serve_scheduler_model") / "export",
    serve_test_config(64, 32, 48, 2, 4, 2, 4, 2, static_cast<int>(max_seq)),
    21);
  auto m = serve::load_model(dir);
  REQUIRE(m.ok());
  return std::move(m.value());
}

// The same as a Qwen3-MoE (QK-norm, heads of 12, gates renormalised).
serve::served_model small_qwen3_model() {
  const auto dir = write_random_export(
    scratch("serve_scheduler_qwen3") / "export",
    qwen3_test_config(64, 32, 48, 2, 4, 2, 12, 4, 2, 96), 21);
  auto m = serve::load_model(dir);
  REQUIRE(m.ok());
  return std::move(m.value());
}

serve::sampling_params greedy() {
  serve::sampling_params p;
  p.temperature = 0;
  return p;
}

serve::sampling_params seeded(uint64_t seed) {
  serve::sampling_params p;
  p.temperature = 0.9;
  p.top_p = 0.95;
  p.top_k = 40;
  p.seed = seed;
  return p;
}

// The request under test alone, then among 31 others that arrive before,
// with and after it, with a batch budget that forces chunked prefill.
void check_invariant(const serve::served_model& m, serve::sampling_params p) {
  const auto prompt = random_prompt(1, 23, 64);
  harness alone(m, 256, {64, 32});
  alone.add(0, prompt, 24, p);
  alone.run_to_end();
  const auto& want = alone.results[0];
  REQUIRE(want.tokens.size() == 24);
  REQUIRE(want.finish == serve::finish_reason::length);

  for (int order = 0; order < 2; ++order) {
    harness crowd(m, 256, {48, 32});
    std::mt19937 rng(100 + order);
    uint64_t next = 1;
    auto add_other = [&] {
      auto pp = (next % 2) ? greedy() : seeded(next);
      crowd.add(next, random_prompt(1000 + next, 3 + rng() % 40, 64),
                1 + rng() % 30, pp);
      ++next;
    };
    for (int i = 0; i < (order == 0 ? 10 : 30); ++i)
      add_other();
    // Let some of them get going, then the request joins a busy batch.
    for (int s = 0; s < 3; ++s)
      REQUIRE(crowd.sched.step().ok());
    crowd.add(0, prompt, 24, p);
    while (next < 32) {
      REQUIRE(crowd.sched.step().ok());
      add_other();
    }
    crowd.run_to_end();
    CHECK(crowd.results.size() == 32);
    const auto& got = crowd.results[0];
    CHECK(got.tokens == want.tokens);
    CHECK(got.logprobs == want.logprobs);
    CHECK(crowd.cache.used_blocks() == 0);
  }
}

} // namespace

TEST_CASE("greedy decoding is the same alone and among 31 others", "[unit]") {
  check_invariant(small_model(), greedy());
}

TEST_CASE("seeded sampling is the same alone and among 31 others", "[unit]") {
  check_invariant(small_model(), seeded(4242));
}

TEST_CASE("Qwen3-MoE: greedy and seeded decoding are the same alone and among "
          "31 others",
          "[unit]") {
  const auto m = small_qwen3_model();
  check_invariant(m, greedy());
  check_invariant(m, seeded(4242));
}

TEST_CASE("preempted requests are recomputed to the same tokens", "[unit]") {
  const auto m = small_model();
  // 32 requests of up to 40 + 30 positions on a cache of 40 blocks of 4
  // (160 positions): most must be preempted at some point.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<outcome> alone_out;
  for (uint64_t i = 0; i < 32; ++i) {
    prompts.push_back(random_prompt(500 + i, 10 + (i * 7) % 31, 64));
    harness alone(m, 64, {64, 32});
    alone.add(i, prompts[i], 30, i % 2 ? greedy() : seeded(i));
    alone.run_to_end();
    alone_out.push_back(alone.results[i]);
  }
  harness tight(m, 40, {64, 32});
  for (uint64_t i = 0; i < 32; ++i)
    tight.add(i, prompts[i], 30, i % 2 ? greedy() : seeded(i));
  tight.run_to_end();
  CHECK(tight.sched.preemptions() > 0);
  for (uint64_t i = 0; i < 32; ++i) {
    INFO("request " << i);
    CHECK(tight.results[i].tokens == alone_out[i].tokens);
    CHECK(tight.results[i].logprobs == alone_out[i].logprobs);
    CHECK(tight.results[i].finish == serve::finish_reason::length);
  }
  CHECK(tight.cache.used_blocks() == 0);
  CHECK(tight.metrics.render("m").find("tutti_serve_preemptions_total")
        != std::string::npos);
}

TEST_CASE("a stop sequence ends the request and is not part of the output",
          "[unit]") {
  const auto m = small_model();
  const auto prompt = random_prompt(9, 12, 64);
  harness free_run(m, 64, {64, 8});
  free_run.add(0, prompt, 20, greedy());
  free_run.run_to_end();
  const auto full = free_run.results[0].tokens;
  REQUIRE(full.size() == 20);
  // Stop at the first place where the pair (full[i], full[i+1]) occurs.
  const std::vector<int32_t> stop = {full[6], full[7]};
  size_t first = 0;
  while (!(full[first] == stop[0] && full[first + 1] == stop[1]))
    ++first;
  harness stopped(m, 64, {64, 8});
  stopped.add(0, prompt, 20, greedy(), {stop, {63, 62, 61}});
  stopped.run_to_end();
  const auto& got = stopped.results[0];
  CHECK(got.finish == serve::finish_reason::stop);
  CHECK(got.tokens == std::vector<int32_t>(full.begin(), full.begin() + first));
  CHECK(stopped.cache.used_blocks() == 0);
}

TEST_CASE("finishing a request early frees its blocks", "[unit]") {
  const auto m = small_model();
  harness h(m, 64, {64, 8});
  h.add(0, random_prompt(3, 30, 64), 50, greedy());
  h.add(1, random_prompt(4, 30, 64), 50, greedy());
  for (int s = 0; s < 5; ++s)
    REQUIRE(h.sched.step().ok());
  CHECK(h.cache.used_blocks() > 0);
  CHECK(h.sched.finish(0, serve::finish_reason::cancelled));
  CHECK(h.sched.finish(1, serve::finish_reason::timeout, "too slow"));
  CHECK_FALSE(h.sched.finish(1, serve::finish_reason::cancelled));
  CHECK(h.cache.used_blocks() == 0);
  CHECK(h.results[0].finish == serve::finish_reason::cancelled);
  CHECK(h.results[1].finish == serve::finish_reason::timeout);
  auto s = h.sched.step();
  REQUIRE(s.ok());
  CHECK_FALSE(s.value());
}

TEST_CASE("with rack affinity, a request its rack has no room for starts "
          "on another rank instead of holding up the queue",
          "[unit]") {
  const auto m = small_model();
  // Four ranks in two racks, each with its own cache of 6 blocks of 4
  // tokens and an engine on it; a step runs each rank's chunks on its
  // engine and returns the logits in the batch's order.
  const serve::kv_geometry g{m.shape.layers, m.shape.kv_heads,
                             m.shape.head_dim, 4};
  std::vector<std::unique_ptr<serve::kv_cache>> caches;
  std::vector<std::unique_ptr<serve::engine>> engines;
  std::vector<serve::kv_cache*> views;
  for (int r = 0; r < 4; ++r) {
    caches.push_back(std::make_unique<serve::kv_cache>(g, 6));
    engines.push_back(std::make_unique<serve::engine>(m, *caches.back()));
    views.push_back(caches.back().get());
  }
  auto forward = [&](const std::vector<serve::seq_chunk>& batch,
                     std::vector<float>& logits) -> status {
    const int64_t V = m.shape.vocab;
    std::vector<std::vector<float>> of_rank(4);
    for (int r = 0; r < 4; ++r) {
      std::vector<serve::seq_chunk> mine;
      for (const auto& c : batch)
        if (c.rank == r)
          mine.push_back(c);
      if (!mine.empty())
        TUTTI_RETURN_IF_ERROR(engines[r]->forward(mine, of_rank[r]));
    }
    logits.clear();
    std::vector<int64_t> taken(4, 0);
    for (const auto& c : batch)
      if (c.want == serve::seq_chunk::logits::last) {
        const float* row = of_rank[c.rank].data() + taken[c.rank]++ * V;
        logits.insert(logits.end(), row, row + V);
      }
    return {};
  };
  serve::scheduler sched(m, views, forward, {40, 16});
  // Every token's experts are on rank 0 and 1 (rack 0): every prompt
  // prefers rack 0.
  auto plan = placement::placement_plan::contiguous(m.shape.layers,
                                                    m.shape.experts, 4);
  plan.token_top_k = 2;
  for (int64_t v = 0; v < m.shape.vocab; ++v)
    for (int64_t l = 0; l < m.shape.layers; ++l)
      plan.token_experts.insert(plan.token_experts.end(), {0, 1});
  auto affinity = serve::request_affinity::from_plan(plan, {0, 0, 1, 1});
  REQUIRE(affinity.ok());
  sched.prefer_racks(affinity.value());
  std::map<uint64_t, serve::finish_reason> finished;
  auto add = [&](uint64_t id, int64_t prompt_tokens) {
    auto r = std::make_unique<serve::request>();
    r->id = id;
    r->prompt = random_prompt(700 + id, prompt_tokens, m.shape.vocab);
    r->max_tokens = 4;
    r->sampling = greedy();
    r->sink = [&finished, id](serve::request_event ev) {
      if (ev.finish != serve::finish_reason::none)
        finished[id] = ev.finish;
    };
    sched.add(std::move(r));
  };
  // The first two take 3 blocks on each rank of rack 0, leaving 3 there
  // and 6 on the others: the third's first chunk (16 tokens, 4 blocks)
  // would still go to rack 0 by the half-free rule, where it cannot fit.
  add(0, 12);
  add(1, 12);
  add(2, 16);
  REQUIRE(sched.step().ok());
  CHECK(sched.placed_on_rank() == std::vector<int64_t>{1, 1, 1, 0});
  CHECK(sched.placed_by_affinity() == 2);
  CHECK(sched.placed_elsewhere() == 1);
  for (int s = 0; s < 100; ++s) {
    auto more = sched.step();
    REQUIRE(more.ok());
    if (!more.value())
      break;
  }
  CHECK(finished.size() == 3);
  for (const auto& [id, why] : finished)
    CHECK(why == serve::finish_reason::length);
  for (const auto& c : caches)
    CHECK(c->used_blocks() == 0);
}
