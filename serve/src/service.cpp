#include "tutti/serve/service.hpp"

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

namespace {

kv_geometry geometry_of(const served_model& m, const service_limits& l) {
  return {m.shape.layers, m.shape.kv_heads, m.shape.head_dim,
          l.kv_block_tokens};
}

} // namespace

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
  const auto g = geometry_of(model, l);
  const int64_t blocks = kv_cache::blocks_for_budget(g, l.kv_cache_bytes);
  if (blocks < 1)
    return status::error("kv_cache_bytes " + std::to_string(l.kv_cache_bytes)
                         + " holds no block (one block is "
                         + std::to_string(g.block_bytes()) + " bytes)");
  return std::unique_ptr<service>(new service(std::move(model), l, blocks));
}

service::service(served_model model, const service_limits& l, int64_t blocks)
  : model_(std::move(model)), limits_(l),
    cache_(geometry_of(model_, l), blocks), engine_(model_, cache_),
    metrics_(model_.shape.layers, model_.shape.experts),
    scheduler_(engine_, cache_, l.batch, &metrics_) {
  publish_gauges();
}

service::~service() { stop(); }

void service::start() {
  if (thread_.joinable())
    return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = false;
  }
  thread_ = std::thread([this] { loop(); });
  ready_ = true;
}

void service::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
  ready_ = false;
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
  if (!scheduler_.fits(prompt + r->max_tokens))
    return refuse(400, "invalid_request_error",
                  "prompt + max_tokens needs more KV cache blocks than the "
                  "cache holds ("
                    + std::to_string(cache_.total_blocks()) + ")",
                  "max_tokens");
  auto stream = std::make_shared<request_stream>();
  {
    std::lock_guard lock(mutex_);
    if (queued_ + static_cast<int64_t>(inbox_.size()) >= limits_.max_queue)
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
    inbox_.push_back(std::move(r));
  }
  wake_.notify_all();
  return out;
}

void service::cancel(uint64_t id) {
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(id);
  }
  wake_.notify_all();
}

void service::publish_gauges() {
  metrics_.set_gauges({scheduler_.running(), scheduler_.waiting(),
                       cache_.used_blocks(), cache_.total_blocks()},
                      engine_.expert_activations());
}

void service::loop() {
  bool busy = false;
  for (;;) {
    std::vector<std::unique_ptr<request>> arrived;
    std::vector<uint64_t> cancelled;
    {
      std::unique_lock lock(mutex_);
      if (!busy)
        wake_.wait_for(lock, std::chrono::milliseconds(100), [&] {
          return stopping_ || !inbox_.empty() || !cancels_.empty();
        });
      if (stopping_)
        break;
      arrived.swap(inbox_);
      cancelled.swap(cancels_);
    }
    for (auto& r : arrived)
      scheduler_.add(std::move(r));
    for (uint64_t id : cancelled)
      scheduler_.finish(id, finish_reason::cancelled);
    const auto now = clock::now();
    for (const auto& [id, deadline] : scheduler_.deadlines())
      if (now > deadline)
        scheduler_.finish(id, finish_reason::timeout,
                          "request timed out after "
                            + std::to_string(limits_.request_timeout_s) + " s");
    auto stepped = scheduler_.step();
    busy = stepped.ok() && stepped.value();
    {
      std::lock_guard lock(mutex_);
      queued_ = scheduler_.waiting();
    }
    publish_gauges();
  }
  // Whatever is left ends as cancelled.
  std::vector<std::unique_ptr<request>> arrived;
  {
    std::lock_guard lock(mutex_);
    arrived.swap(inbox_);
  }
  for (auto& r : arrived)
    scheduler_.add(std::move(r));
  for (const auto& [id, deadline] : scheduler_.deadlines())
    scheduler_.finish(id, finish_reason::cancelled);
  publish_gauges();
}

} // namespace tutti::serve
