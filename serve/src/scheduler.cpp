#include "tutti/serve/scheduler.hpp"

#include <algorithm>
#include <cmath>

#include "tutti/serve/serve_metrics.hpp"

namespace tutti::serve {

const char* finish_reason_name(finish_reason r) {
  switch (r) {
  case finish_reason::none:
    return "none";
  case finish_reason::length:
    return "length";
  case finish_reason::stop:
    return "stop";
  case finish_reason::cancelled:
    return "cancelled";
  case finish_reason::timeout:
    return "timeout";
  case finish_reason::error:
    return "error";
  }
  return "none";
}

scheduler::scheduler(engine& e, kv_cache& cache, const batch_limits& limits,
                     serve_metrics* metrics)
  : scheduler(
    e.model(), {&cache},
    [&e](const std::vector<seq_chunk>& batch, std::vector<float>& logits) {
      return e.forward(batch, logits);
    },
    limits, metrics) {}

scheduler::scheduler(const served_model& model, std::vector<kv_cache*> caches,
                     forward_fn forward, const batch_limits& limits,
                     serve_metrics* metrics)
  : model_(model), caches_(std::move(caches)), forward_(std::move(forward)),
    limits_(limits), metrics_(metrics), placed_on_rank_(caches_.size(), 0) {}

int64_t scheduler::used_blocks() const {
  int64_t n = 0;
  for (const auto* c : caches_)
    n += c->used_blocks();
  return n;
}

int64_t scheduler::total_blocks() const {
  int64_t n = 0;
  for (const auto* c : caches_)
    n += c->total_blocks();
  return n;
}

// Where a joining request goes: the rank that caches the longest prefix of
// its tokens, else the one with the most free blocks, the first of equals
// (with prefer_racks: of its prompt's rack, unless that one has less than
// half the free blocks of the emptiest); it takes the cached blocks and
// starts after them. by_rack false: by load alone.
scheduler::placed_by scheduler::place(request& r, bool by_rack) {
  const int64_t n = static_cast<int64_t>(r.tokens.size());
  int32_t best = 0;
  int64_t best_match = -1;
  for (size_t i = 0; i < caches_.size(); ++i) {
    const int64_t match = limits_.prefix_caching
                            ? caches_[i]->match_prefix(r.tokens.data(), n)
                            : 0;
    if (match > best_match
        || (match == best_match
            && caches_[i]->free_blocks() > caches_[best]->free_blocks())) {
      best = static_cast<int32_t>(i);
      best_match = match;
    }
  }
  // Placed by load where the rack was asked for is placed elsewhere.
  placed_by how = by_rack ? placed_by::load : placed_by::elsewhere;
  if (affinity_ && by_rack && best_match <= 0) {
    const int64_t rack = affinity_->rack_for(r.tokens);
    int32_t in_rack = -1;
    for (size_t i = 0; i < caches_.size(); ++i)
      if (affinity_->rack_of_rank(int64_t(i)) == rack
          && (in_rack < 0
              || caches_[i]->free_blocks() > caches_[in_rack]->free_blocks()))
        in_rack = static_cast<int32_t>(i);
    how = placed_by::elsewhere;
    if (in_rack >= 0
        && 2 * caches_[in_rack]->free_blocks() >= caches_[best]->free_blocks()) {
      best = in_rack;
      how = placed_by::affinity;
    }
  }
  r.rank = best;
  r.hashed = 0;
  r.prefix_hash = 0;
  r.computed = 0;
  if (best_match > 0) {
    r.hashed = cache_of(r).match_prefix(r.tokens.data(), n, &r.blocks,
                                        &r.prefix_hash);
    r.computed = r.hashed * cache_of(r).geometry().block_tokens;
    prefix_hit_tokens_ += r.computed;
  }
  return how;
}

void scheduler::forget_blocks(request& r) {
  cache_of(r).release(r.blocks);
  r.computed = 0;
  r.hashed = 0;
  r.prefix_hash = 0;
}

// Blocks r has filled become shareable.
void scheduler::register_full_blocks(request& r) {
  if (!limits_.prefix_caching)
    return;
  auto& cache = cache_of(r);
  const int64_t bt = cache.geometry().block_tokens;
  for (; (r.hashed + 1) * bt <= r.computed; ++r.hashed)
    r.prefix_hash = cache.register_block(r.blocks[r.hashed], r.prefix_hash,
                                         r.tokens.data() + r.hashed * bt);
}

void scheduler::add(std::unique_ptr<request> r) {
  r->tokens = r->prompt;
  waiting_.push_back(std::move(r));
}

std::vector<std::pair<uint64_t, clock::time_point>> scheduler::deadlines()
  const {
  std::vector<std::pair<uint64_t, clock::time_point>> out;
  for (const auto& r : running_)
    out.emplace_back(r->id, r->deadline);
  for (const auto& r : waiting_)
    out.emplace_back(r->id, r->deadline);
  return out;
}

void scheduler::end(std::unique_ptr<request> r, finish_reason why,
                    const std::string& error) {
  cache_of(*r).release(r->blocks);
  request_event ev;
  // Whatever was held back for a possible stop sequence goes out (a
  // matched stop sequence is already cut off).
  if (why != finish_reason::cancelled)
    for (int64_t i = r->released; i < static_cast<int64_t>(r->generated.size());
         ++i)
      ev.tokens.push_back(r->generated[i]);
  ev.finish = why;
  ev.error = error;
  if (metrics_)
    metrics_->finished(*r, why, clock::now());
  if (r->sink)
    r->sink(std::move(ev));
}

bool scheduler::finish(uint64_t id, finish_reason why,
                       const std::string& error) {
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if ((*it)->id == id) {
      auto r = std::move(*it);
      running_.erase(it);
      end(std::move(r), why, error);
      return true;
    }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) {
      auto r = std::move(*it);
      waiting_.erase(it);
      end(std::move(r), why, error);
      return true;
    }
  return false;
}

void scheduler::preempt(request* victim, std::vector<planned>& plan,
                        int64_t& budget) {
  for (auto it = plan.begin(); it != plan.end(); ++it)
    if (it->r == victim) {
      budget += it->n;
      plan.erase(it);
      break;
    }
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const auto& p) { return p.get() == victim; });
  auto r = std::move(*it);
  running_.erase(it);
  forget_blocks(*r);
  ++r->preemptions;
  ++preemptions_;
  if (metrics_)
    metrics_->preempted();
  waiting_.push_front(std::move(r));
}

// Blocks for r's next n positions, preempting the newest running requests
// of r's rank (r itself last) until they fit. False if r was preempted.
bool scheduler::reserve_or_preempt(request* r, int64_t n,
                                   std::vector<planned>& plan,
                                   int64_t& budget) {
  while (!cache_of(*r).reserve(r->blocks, r->computed + n)) {
    request* newest = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend() && !newest; ++it)
      if ((*it)->rank == r->rank)
        newest = it->get();
    preempt(newest, plan, budget);
    if (newest == r)
      return false;
  }
  return true;
}

bool scheduler::take_token(request& r, const sampled_token& t) {
  r.generated.push_back(t);
  r.tokens.push_back(t.token);
  const auto now = clock::now();
  const bool first = r.generated.size() == 1;
  if (metrics_)
    metrics_->token(r, now, first);
  if (first)
    r.first_token_at = now;
  r.last_token_at = now;
  const int64_t n = static_cast<int64_t>(r.generated.size());
  auto ends_with = [&](const std::vector<int32_t>& s, int64_t len) {
    if (len > n)
      return false;
    for (int64_t i = 0; i < len; ++i)
      if (r.generated[n - len + i].token != s[i])
        return false;
    return true;
  };
  for (const auto& s : r.stop)
    if (!s.empty() && ends_with(s, static_cast<int64_t>(s.size()))) {
      // The stop sequence itself is not part of the output.
      r.generated.resize(n - s.size());
      r.released = std::min<int64_t>(r.released, r.generated.size());
      return true;
    }
  // Hold back a suffix that may still grow into a stop sequence.
  int64_t hold = 0;
  for (const auto& s : r.stop)
    for (int64_t len = static_cast<int64_t>(s.size()) - 1; len > hold; --len)
      if (ends_with(s, len)) {
        hold = len;
        break;
      }
  request_event ev;
  for (int64_t i = r.released; i < n - hold; ++i)
    ev.tokens.push_back(r.generated[i]);
  r.released = std::max(r.released, n - hold);
  if (!ev.tokens.empty() && r.sink)
    r.sink(std::move(ev));
  return n >= r.max_tokens
         || static_cast<int64_t>(r.tokens.size()) >= model_.shape.max_positions;
}

expected<bool> scheduler::step() {
  std::vector<planned> plan;
  int64_t budget = limits_.max_batch_tokens;
  // Running requests: decodes first, then prefill chunks, oldest first.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      request* r = running_[i].get();
      const int64_t need = static_cast<int64_t>(r->tokens.size()) - r->computed;
      if ((pass == 0) != (need == 1))
        continue;
      if (std::any_of(plan.begin(), plan.end(),
                      [&](const planned& p) { return p.r == r; }))
        continue;
      const int64_t n = std::min(need, budget);
      if (!reserve_or_preempt(r, n, plan, budget))
        break; // r was the newest; everything after it is gone too
      plan.push_back({r, n});
      budget -= n;
    }
  }
  // Waiting requests join while there is room; they never preempt.
  while (!waiting_.empty() && budget > 0
         && static_cast<int64_t>(running_.size()) < limits_.max_sequences) {
    request* r = waiting_.front().get();
    auto how = r->blocks.empty() ? place(*r) : placed_by::load;
    const int64_t n = std::min<int64_t>(
      static_cast<int64_t>(r->tokens.size()) - r->computed, budget);
    bool reserved = cache_of(*r).reserve(r->blocks, r->computed + n);
    if (!reserved && how == placed_by::affinity) {
      // Its rack has no room for it now: another rank may, and the queue
      // behind it should not wait for its rack.
      forget_blocks(*r);
      how = place(*r, false);
      reserved = cache_of(*r).reserve(r->blocks, r->computed + n);
    }
    if (!reserved) {
      forget_blocks(*r); // waiting requests hold no blocks
      break;
    }
    if (!r->started && metrics_)
      metrics_->started(*r, clock::now());
    // Counted once it holds its blocks: a request placed again while it
    // waits for room counts once.
    ++placed_on_rank_[r->rank];
    placed_by_affinity_ += how == placed_by::affinity ? 1 : 0;
    placed_elsewhere_ += how == placed_by::elsewhere ? 1 : 0;
    r->started = true;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    plan.push_back({r, n});
    budget -= n;
  }
  if (plan.empty())
    return !running_.empty() || !waiting_.empty();

  chunks_.clear();
  for (const auto& p : plan) {
    seq_chunk c;
    c.tokens = p.r->tokens.data() + p.r->computed;
    c.count = p.n;
    c.start = p.r->computed;
    c.blocks = &p.r->blocks;
    c.rank = p.r->rank;
    c.want = p.r->computed + p.n == static_cast<int64_t>(p.r->tokens.size())
               ? seq_chunk::logits::last
               : seq_chunk::logits::none;
    chunks_.push_back(c);
  }
  if (auto s = forward_(chunks_, logits_); !s.ok()) {
    for (const auto& p : plan)
      finish(p.r->id, finish_reason::error, s.message());
    return s;
  }
  const int64_t vocab = model_.shape.vocab;
  int64_t row = 0;
  std::vector<request*> done;
  std::vector<uint64_t> broken; // non-finite logits: ended as errors
  for (size_t i = 0; i < plan.size(); ++i) {
    request& r = *plan[i].r;
    r.computed += plan[i].n;
    register_full_blocks(r);
    if (chunks_[i].want != seq_chunk::logits::last)
      continue;
    const float* lg = logits_.data() + row * vocab;
    ++row;
    // A damaged model (NaN or Inf weights) answers with an error, not with
    // whatever token a NaN compares into.
    if (!std::all_of(lg, lg + vocab, [](float v) { return std::isfinite(v); })) {
      broken.push_back(r.id);
      continue;
    }
    const auto t = sample_token(lg, vocab, r.sampling,
                                static_cast<int64_t>(r.generated.size()));
    if (take_token(r, t))
      done.push_back(&r);
  }
  for (request* r : done) {
    const bool stopped = static_cast<int64_t>(r->generated.size())
                           < r->max_tokens
                         && static_cast<int64_t>(r->tokens.size())
                              < model_.shape.max_positions;
    finish(r->id, stopped ? finish_reason::stop : finish_reason::length);
  }
  for (uint64_t id : broken)
    finish(id, finish_reason::error,
           "the model produced non-finite logits (NaN or Inf)");
  return true;
}

} // namespace tutti::serve
