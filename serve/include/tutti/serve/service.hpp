#pragma once
// The serving engine of one replica on its own thread (never a CAF
// worker: every step blocks on the kernels): requests come in through
// submit() from any thread, the thread runs the scheduler step by step,
// and each request's tokens come back through its request_stream.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/serve/model.hpp"
#include "tutti/serve/scheduler.hpp"
#include "tutti/serve/serve_metrics.hpp"

namespace tutti::serve {

struct service_limits {
  batch_limits batch;
  int64_t max_queue = 64;           // requests waiting beyond the batch
  int64_t max_prompt_tokens = 0;    // 0: the model's max positions
  int64_t max_output_tokens = 0;    // 0: the model's max positions
  double request_timeout_s = 300.0; // arrival to the last token
  int64_t kv_cache_bytes = 64ll << 20;
  int64_t kv_block_tokens = 16;
};

// A request's events, in order, for the thread that waits on it.
class request_stream {
public:
  // The next event; false if none came within `wait`.
  bool next(request_event& ev, clock::duration wait);
  void push(request_event ev);

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<request_event> events_;
};

// Why a request was not taken: the HTTP status and OpenAI's error type.
struct refusal {
  int http_status = 0; // 0: accepted
  std::string type;    // invalid_request_error, ...
  std::string message;
  std::string param; // the request field at fault, if one is
};

class service {
public:
  // Sizes the KV cache from the budget; refuses limits it cannot honour.
  static expected<std::unique_ptr<service>> create(served_model model,
                                                   const service_limits& l);
  ~service();

  void start(); // runs the engine thread; ready() from then on
  void stop();  // ends every request (cancelled) and joins the thread
  bool ready() const { return ready_.load(); }

  struct submission {
    uint64_t id = 0;
    std::shared_ptr<request_stream> stream;
    refusal refused;
  };
  // r's prompt, max_tokens, sampling and stop are filled in; the service
  // sets its id, times and sink.
  submission submit(std::unique_ptr<request> r);
  // Ends a request (client gone): its blocks are freed at the next step.
  void cancel(uint64_t id);

  const served_model& model() const { return model_; }
  const service_limits& limits() const { return limits_; }
  serve_metrics& metrics() { return metrics_; }
  int64_t kv_blocks() const { return cache_.total_blocks(); }

private:
  service(served_model model, const service_limits& l, int64_t blocks);
  void loop();
  void publish_gauges();

  served_model model_;
  service_limits limits_;
  kv_cache cache_;
  engine engine_;
  serve_metrics metrics_;
  scheduler scheduler_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<request>> inbox_;
  std::vector<uint64_t> cancels_;
  int64_t queued_ = 0; // inbox + scheduler's waiting, as of the last step
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  std::atomic<bool> ready_{false};
  std::thread thread_;
};

} // namespace tutti::serve
