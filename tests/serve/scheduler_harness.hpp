#pragma once
// Shared by the scheduler tests: one model's engine, KV cache and
// scheduler driven step by step, with every request's events collected.

#include <map>
#include <memory>
#include <vector>

#include "serve_test_support.hpp"
#include "tutti/serve/scheduler.hpp"
#include "tutti/serve/serve_metrics.hpp"

namespace tutti::testing {

// What one request yielded.
struct scheduler_outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  serve::finish_reason finish = serve::finish_reason::none;
  int64_t events = 0;
};

struct scheduler_harness {
  scheduler_harness(const serve::served_model& m, int64_t blocks,
                    serve::batch_limits limits, int64_t block_tokens = 4)
    : cache({m.shape.layers, m.shape.kv_heads, m.shape.head_dim, block_tokens},
            blocks),
      engine(m, cache), metrics(m.shape.layers, m.shape.experts),
      sched(engine, cache, limits, &metrics) {}

  // Queues a request; its events land in results[id].
  void add(uint64_t id, std::vector<int32_t> prompt, int64_t max_tokens,
           serve::sampling_params p,
           std::vector<std::vector<int32_t>> stop = {}) {
    auto r = std::make_unique<serve::request>();
    r->id = id;
    r->prompt = std::move(prompt);
    r->max_tokens = max_tokens;
    r->sampling = p;
    r->stop = std::move(stop);
    r->sink = [this, id](serve::request_event ev) {
      auto& o = results[id];
      ++o.events;
      for (const auto& t : ev.tokens) {
        o.tokens.push_back(t.token);
        o.logprobs.push_back(t.logprob);
      }
      if (ev.finish != serve::finish_reason::none)
        o.finish = ev.finish;
    };
    sched.add(std::move(r));
  }

  void run_to_end(int64_t max_steps = 100000) {
    for (int64_t i = 0; i < max_steps; ++i) {
      auto s = sched.step();
      REQUIRE(s.ok());
      if (!s.value())
        return;
    }
    FAIL("scheduler did not finish");
  }

  serve::kv_cache cache;
  serve::engine engine;
  serve::serve_metrics metrics;
  serve::scheduler sched;
  std::map<uint64_t, scheduler_outcome> results;
};

} // namespace tutti::testing
