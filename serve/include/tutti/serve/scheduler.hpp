#pragma once
// Continuous batching over the paged KV cache. Every step() builds one
// batch: each running sequence's next token (decodes first, so a long
// prompt cannot starve them), then chunks of the prompts still being
// prefilled, then waiting requests as room allows, all within
// max_batch_tokens and max_sequences; runs the engine once; samples; and
// lets finished requests leave. When the cache runs out of blocks the
// newest running requests are preempted: their blocks are freed and they
// wait at the front of the queue to be recomputed (prompt and the tokens
// they already generated), which yields the same tokens because every row
// is computed batch-invariantly. Single-threaded: the service's thread
// owns it. With several ranks (expert parallelism) each rank has its own
// KV cache: a request joins on the rank with the most free blocks and stays
// there until it ends or is preempted; with prefer_racks, on a rank of the
// rack its prompt's experts are in (request_affinity.hpp) unless that rank
// has less than half the free blocks of the emptiest, or too few for the
// request's first chunk (it then starts elsewhere rather than hold up the
// queue behind it). A joining request whose leading
// blocks of tokens are cached (kv_cache.hpp) takes them and starts after
// them; the blocks each request fills are registered as it goes.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/serve_limits.hpp"
#include "tutti/serve/engine.hpp"
#include "tutti/serve/request.hpp"
#include "tutti/serve/request_affinity.hpp"

namespace tutti::serve {

class serve_metrics;

class scheduler {
public:
  scheduler(engine& e, kv_cache& cache, const batch_limits& limits,
            serve_metrics* metrics = nullptr);
  // A step through `forward` (ep_ranks::forward) over one cache per rank.
  using forward_fn =
    std::function<status(const std::vector<seq_chunk>&, std::vector<float>&)>;
  scheduler(const served_model& model, std::vector<kv_cache*> caches,
            forward_fn forward, const batch_limits& limits,
            serve_metrics* metrics = nullptr);

  // serve.rack_affinity: requests start in the rack of their prompt's
  // experts (a rank per cache, in the affinity's rank order).
  void prefer_racks(std::shared_ptr<const request_affinity> a) {
    affinity_ = std::move(a);
  }
  // Requests placed in their prompt's rack, and those that were not
  // because its ranks were too full.
  int64_t placed_by_affinity() const { return placed_by_affinity_; }
  int64_t placed_elsewhere() const { return placed_elsewhere_; }
  // Requests placed on each rank (a preempted one again when it rejoins).
  const std::vector<int64_t>& placed_on_rank() const { return placed_on_rank_; }

  // Queues a request (the caller enforces the queue limit and checks that
  // it can ever fit in the cache: fits()).
  void add(std::unique_ptr<request> r);

  // Ranks holding sequences (a cache each).
  int64_t ranks() const { return static_cast<int64_t>(caches_.size()); }
  // Whether `tokens` positions fit in the whole cache of a rank.
  bool fits(int64_t tokens) const {
    return caches_[0]->blocks_for_tokens(tokens) <= caches_[0]->total_blocks();
  }

  // Ends request `id` (running or waiting) with `why`, freeing its blocks.
  // False if it is not here (already finished).
  bool finish(uint64_t id, finish_reason why, const std::string& error = {});

  // One engine step. false: nothing to run (no request running or
  // waiting). An engine failure ends every request of the batch with it.
  expected<bool> step();

  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t preemptions() const { return preemptions_; }
  // Prompt positions taken from the prefix cache instead of computed.
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  int64_t used_blocks() const;  // over every rank's cache
  int64_t total_blocks() const; // over every rank's cache
  // Every request's id with its deadline, for the service's timeouts.
  std::vector<std::pair<uint64_t, clock::time_point>> deadlines() const;

private:
  struct planned {
    request* r;
    int64_t n;
  };
  bool reserve_or_preempt(request* r, int64_t n, std::vector<planned>& plan,
                          int64_t& budget);
  void preempt(request* r, std::vector<planned>& plan, int64_t& budget);
  // Appends the sampled token; true when the request is done.
  bool take_token(request& r, const sampled_token& t);
  void end(std::unique_ptr<request> r, finish_reason why,
           const std::string& error);

  kv_cache& cache_of(const request& r) { return *caches_[r.rank]; }
  // How place() chose: by load (or a cached prefix), in the prompt's rack,
  // or elsewhere though rack_affinity asked for it.
  enum class placed_by { load, affinity, elsewhere };
  placed_by place(request& r, bool by_rack = true);
  void forget_blocks(request& r);
  void register_full_blocks(request& r);

  const served_model& model_;
  std::vector<kv_cache*> caches_;
  forward_fn forward_;
  batch_limits limits_;
  serve_metrics* metrics_;
  std::vector<std::unique_ptr<request>> running_; // in admission order
  std::deque<std::unique_ptr<request>> waiting_;
  int64_t preemptions_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  std::shared_ptr<const request_affinity> affinity_;
  int64_t placed_by_affinity_ = 0, placed_elsewhere_ = 0;
  std::vector<int64_t> placed_on_rank_; // per cache
  std::vector<seq_chunk> chunks_;
  std::vector<float> logits_;
};

} // namespace tutti::serve
