#include "tutti/serve/service.hpp"

#include "tutti/serve/expert_loading.hpp"
#include "tutti/serve/serve_memory.hpp"

#include <caf/actor_system.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>

#include "ep_actors.hpp"
#include "tutti/runtime/system_config.hpp"

namespace tutti::serve {

bool request_stream::next(request_event& ev, clock::duration wait) {
  std::unique_lock lock(mutex_);
  if (!cv_.wait_for(lock, wait, [&] { return !events_.empty(); }))
    return false;
  ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

void request_stream::push(request_event ev) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

// With the io middleman where the replica spans daemons (the rendezvous).
struct service::actor_runtime {
  explicit actor_runtime(bool network) : config(system_options{network}) {}
  tutti_system_config config;
  caf::actor_system system{config};
};

kv_geometry geometry_of(const served_model& m, const service_limits& l) {
  return geometry_of_shape(m.shape, l.kv_block_tokens);
}

expected<std::unique_ptr<service>> service::create(served_model model,
                                                   const service_limits& l) {
  if (l.kv_block_tokens <= 0)
    return status::error("kv_block_tokens must be positive");
  if (l.batch.max_batch_tokens <= 0 || l.batch.max_sequences <= 0)
    return status::error("max_batch_tokens and max_sequences must be positive");
  if (l.batch.max_batch_tokens < l.batch.max_sequences)
    return status::error(
      "max_batch_tokens (" + std::to_string(l.batch.max_batch_tokens)
      + ") must be at least max_sequences ("
      + std::to_string(l.batch.max_sequences)
      + "): every running request decodes a token each step");
  if (l.ep_ranks < 0)
    return status::error("ep_size must be at least 1");
  const auto g = geometry_of(model, l);
  const int64_t ranks = kv_budget_shares(l);
  const int64_t blocks = kv_cache::blocks_for_budget(g, l.kv_cache_bytes)
                         / ranks;
  if (blocks < 1)
    return status::error("kv_cache_bytes " + std::to_string(l.kv_cache_bytes)
                         + " holds no block per rank (one block is "
                         + std::to_string(g.block_bytes()) + " bytes, "
                         + std::to_string(ranks) + " ranks)");
  std::unique_ptr<service> out(new service(std::move(model), l));
  TUTTI_RETURN_IF_ERROR(out->build(blocks));
  return out;
}

service::service(served_model model, const service_limits& l)
  : model_(std::move(model)), limits_(l),
    metrics_(model_.shape.layers, model_.shape.experts) {
  metrics_.set_expert_weights(to_string(model_.expert_dtype),
                              expert_kernel_name(model_));
  metrics_.set_kv_bytes_per_token(geometry_of(model_, l).token_bytes());
}

// The engine on the scheduler's thread, or the rank and expert shard
// actors.
status service::build(int64_t blocks) {
  runtime_ = std::make_unique<actor_runtime>(
    limits_.cluster.spans_daemons());
  if (limits_.ep_ranks == 0) {
    // The engine alone dispatches nothing: there is nothing to quantize.
    if (limits_.dispatch != dispatch_dtype::fp32)
      return status::error(std::string("serve.dispatch_dtype ")
                           + to_string(limits_.dispatch)
                           + " needs the expert-parallel ranks (ep_ranks 0)");
    cache_ = std::make_unique<kv_cache>(geometry_of(model_, limits_), blocks);
    engine_ = std::make_unique<engine>(model_, *cache_);
    scheduler_ = std::make_unique<scheduler>(*engine_, *cache_, limits_.batch,
                                             &metrics_);
  } else {
    ep_options o;
    o.ranks = limits_.ep_ranks;
    o.blocks_per_rank = blocks;
    o.block_tokens = limits_.kv_block_tokens;
    o.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(limits_.step_timeout_s * 1000));
    o.cluster = limits_.cluster;
    o.layout = limits_.layout;
    o.racks = limits_.replan.rack;
    o.rack_aware_alltoall = limits_.rack_aware_alltoall;
    o.dispatch = limits_.dispatch;
    o.max_tier_restarts = limits_.expert_tier_restarts;
    o.guard_tls = limits_.guard_tls;
    if (!model_.held_experts.empty() && !limits_.model_dir.empty())
      o.loader = std::make_shared<expert_loader>(model_, limits_.model_dir);
    auto r = ep_ranks::start(runtime_->system, model_, o);
    if (!r)
      return r.error();
    ranks_ = std::move(r.value());
    if (limits_.replan.enabled())
      replanner_ = std::make_unique<live_replanner>(limits_.replan);
    std::vector<kv_cache*> caches;
    for (int64_t i = 0; i < ranks_->sequence_ranks(); ++i)
      caches.push_back(&ranks_->cache(i));
    auto* ranks = ranks_.get();
    scheduler_ = std::make_unique<scheduler>(
      model_, std::move(caches),
      [ranks](const std::vector<seq_chunk>& b, std::vector<float>& logits) {
        return ranks->forward(b, logits);
      },
      limits_.batch, &metrics_);
    scheduler_->prefer_racks(limits_.affinity);
  }
  publish_gauges();
  return {};
}

bool service::shards_up() {
  return ready() && (!ranks_ || ranks_->shards_up());
}

bool service::ready() const {
  return ready_.load() && !(ranks_ && ranks_->failed());
}

bool service::stop_wanted() const { return ranks_ && ranks_->stop_wanted(); }

std::string service::failure() const {
  return ranks_ ? ranks_->failure() : std::string();
}

service::~service() {
  stop();
  scheduler_.reset();
  ranks_.reset(); // the actors go before the model they read
  runtime_.reset();
}

void service::start() {
  std::lock_guard lock(mutex_);
  if (scheduler_actor_)
    return;
  scheduler_actor_ = runtime_->system.spawn<caf::detached>(
    [this](caf::blocking_actor* self) { loop(self); });
  ready_ = true;
}

bool service::drain(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mutex_);
    ready_ = false;
  }
  const auto deadline = clock::now() + grace;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (in_mailbox_ + queued_ + running_ == 0)
        return true;
    }
    if (clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void service::stop() {
  caf::actor scheduler;
  {
    // Not ready first: a submission either got in before the stop message
    // (and ends cancelled) or is refused.
    std::lock_guard lock(mutex_);
    ready_ = false;
    scheduler = std::move(scheduler_actor_);
    scheduler_actor_ = nullptr;
  }
  if (!scheduler)
    return;
  caf::scoped_actor self{runtime_->system};
  self->send(scheduler, stop_atom_v);
  self->wait_for(scheduler);
}

service::submission service::submit(std::unique_ptr<request> r) {
  submission out;
  auto refuse = [&](int status, std::string type, std::string message,
                    std::string param = {}) {
    metrics_.rejected(status == 429   ? "queue_full"
                      : status == 503 ? "not_ready"
                                      : "invalid");
    out.refused = {status, std::move(type), std::move(message),
                   std::move(param)};
    return out;
  };
  const auto& s = model_.shape;
  const int64_t prompt = static_cast<int64_t>(r->prompt.size());
  const int64_t max_prompt = limits_.max_prompt_tokens > 0
                               ? limits_.max_prompt_tokens
                               : s.max_positions;
  const int64_t max_output = limits_.max_output_tokens > 0
                               ? limits_.max_output_tokens
                               : s.max_positions;
  if (!ready())
    return refuse(503, "service_unavailable", "the model is not ready");
  if (prompt == 0)
    return refuse(400, "invalid_request_error", "prompt is empty", "prompt");
  for (int32_t t : r->prompt)
    if (t < 0 || t >= s.vocab)
      return refuse(400, "invalid_request_error",
                    "prompt token " + std::to_string(t)
                      + " is outside the vocabulary (size "
                      + std::to_string(s.vocab) + ")",
                    "prompt");
  if (prompt > max_prompt)
    return refuse(400, "invalid_request_error",
                  "prompt has " + std::to_string(prompt)
                    + " tokens; the limit is " + std::to_string(max_prompt),
                  "prompt");
  if (r->max_tokens == 0 && prompt < s.max_positions)
    r->max_tokens = std::min(max_output, s.max_positions - prompt);
  if (r->max_tokens < 1 || r->max_tokens > max_output)
    return refuse(400, "invalid_request_error",
                  "max_tokens must be between 1 and "
                    + std::to_string(max_output),
                  "max_tokens");
  if (prompt + r->max_tokens > s.max_positions)
    return refuse(400, "invalid_request_error",
                  "prompt (" + std::to_string(prompt)
                    + " tokens) + max_tokens (" + std::to_string(r->max_tokens)
                    + ") exceeds the model's context of "
                    + std::to_string(s.max_positions));
  if (!scheduler_->fits(prompt + r->max_tokens))
    return refuse(400, "invalid_request_error",
                  "prompt + max_tokens needs more KV cache blocks than the "
                  "cache holds ("
                    + std::to_string(scheduler_->total_blocks()
                                     / scheduler_->ranks())
                    + " per rank)",
                  "max_tokens");
  auto stream = std::make_shared<request_stream>();
  {
    std::lock_guard lock(mutex_);
    if (!ready())
      return refuse(503, "service_unavailable", "the model is not ready");
    if (queued_ + in_mailbox_ >= limits_.max_queue)
      return refuse(429, "rate_limit_exceeded",
                    "the queue is full (" + std::to_string(limits_.max_queue)
                      + " requests); retry later");
    r->id = next_id_++;
    r->arrival = clock::now();
    r->deadline = r->arrival
                  + std::chrono::duration_cast<clock::duration>(
                    std::chrono::duration<double>(limits_.request_timeout_s));
    r->sink = [stream](request_event ev) { stream->push(std::move(ev)); };
    out.id = r->id;
    out.stream = stream;
    ++in_mailbox_;
    caf::anon_send(scheduler_actor_,
                   std::make_shared<std::unique_ptr<request>>(std::move(r)));
  }
  return out;
}

void service::cancel(uint64_t id) {
  std::lock_guard lock(mutex_);
  if (scheduler_actor_)
    caf::anon_send(scheduler_actor_, abort_atom_v, static_cast<int64_t>(id));
}

void service::publish_gauges() {
  serve_gauges g;
  g.running = scheduler_->running();
  g.waiting = scheduler_->waiting();
  g.kv_used_blocks = scheduler_->used_blocks();
  g.kv_total_blocks = scheduler_->total_blocks();
  g.prefix_cache_hit_tokens = scheduler_->prefix_hit_tokens();
  g.placed_by_affinity = scheduler_->placed_by_affinity();
  g.placed_elsewhere = scheduler_->placed_elsewhere();
  g.placed_on_rank = scheduler_->placed_on_rank();
  if (ranks_) {
    g.all_to_all_bytes = ranks_->exchanged_bytes();
    g.all_to_all_link_bytes = ranks_->exchanged_link_bytes();
    g.expert_shard_restarts = ranks_->shard_restarts();
    g.expert_tier_restarts = ranks_->tier_restarts();
    g.offloaded_rows = ranks_->offloaded_rows();
    g.routed_rows = ranks_->routed_rows();
    for (char c : ranks_->layout()->offloaded)
      g.offloaded_experts += c ? 1 : 0;
    g.expert_loaded_bytes = ranks_->expert_loaded_bytes();
    if (replanner_) {
      g.cross_rack_share = replanner_->cross_rack_share();
      g.replans = replanner_->replans();
    }
    if (const double waited = ranks_->take_offload_wait_s(); waited > 0.0)
      metrics_.offload_waited(waited);
  }
  metrics_.set_gauges(g, ranks_ ? ranks_->expert_activations()
                                : engine_->expert_activations());
}

// The scheduler actor: takes what arrived (waiting for it only when there
// is nothing to run), then runs one step.
void service::loop(caf::blocking_actor* self) {
  bool busy = false, stopping = false;
  std::vector<std::unique_ptr<request>> arrived;
  std::vector<uint64_t> cancelled;
  auto take_mail = [&](std::chrono::milliseconds wait) {
    for (bool more = true; more && !stopping;) {
      more = false;
      self->receive(
        [&](request_handoff& h) {
          arrived.push_back(std::move(*h));
          more = true;
        },
        [&](abort_atom, int64_t id) {
          cancelled.push_back(static_cast<uint64_t>(id));
          more = true;
        },
        [&](stop_atom) { stopping = true; }, caf::after(wait) >> [] {});
      wait = std::chrono::milliseconds(0);
    }
  };
  while (!stopping) {
    take_mail(busy ? std::chrono::milliseconds(0)
                   : std::chrono::milliseconds(100));
    if (stopping)
      break;
    const auto taken = static_cast<int64_t>(arrived.size());
    for (auto& r : arrived)
      scheduler_->add(std::move(r));
    arrived.clear();
    for (uint64_t id : cancelled)
      scheduler_->finish(id, finish_reason::cancelled);
    cancelled.clear();
    const auto now = clock::now();
    for (const auto& [id, deadline] : scheduler_->deadlines())
      if (now > deadline)
        scheduler_->finish(id, finish_reason::timeout,
                           "request timed out after "
                             + std::to_string(limits_.request_timeout_s)
                             + " s");
    auto stepped = scheduler_->step();
    busy = stepped.ok() && stepped.value();
    if (busy && replanner_) // between two steps: none in flight
      replanner_->after_step(*ranks_);
    {
      // Counted out of the mailbox only once counted in the scheduler, so
      // drain() never sees a request in neither.
      std::lock_guard lock(mutex_);
      in_mailbox_ -= taken;
      queued_ = scheduler_->waiting();
      running_ = scheduler_->running();
    }
    publish_gauges();
  }
  // Whatever is left, and whatever was sent before the stop, ends as
  // cancelled.
  stopping = false;
  take_mail(std::chrono::milliseconds(0));
  for (auto& r : arrived)
    scheduler_->add(std::move(r));
  for (const auto& [id, deadline] : scheduler_->deadlines())
    scheduler_->finish(id, finish_reason::cancelled);
  {
    std::lock_guard lock(mutex_);
    in_mailbox_ -= static_cast<int64_t>(arrived.size());
    queued_ = running_ = 0;
  }
  publish_gauges();
}

} // namespace tutti::serve
