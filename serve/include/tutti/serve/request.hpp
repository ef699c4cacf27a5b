#pragma once
// One completion request as the scheduler keeps it, and what it tells the
// request's owner as tokens come out.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tutti/serve/sampler.hpp"

namespace tutti::serve {

using clock = std::chrono::steady_clock;

enum class finish_reason { none, length, stop, cancelled, timeout, error };

// "length", "stop", ... as OpenAI names them (cancelled, timeout and error
// are tutti's: OpenAI's API has no such finish).
const char* finish_reason_name(finish_reason r);

struct request_event {
  std::vector<sampled_token> tokens; // released since the last event
  finish_reason finish = finish_reason::none;
  std::string error; // with finish_reason::error
};

struct request {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16; // 0: as many as the limits and context allow
  sampling_params sampling;
  std::vector<std::vector<int32_t>> stop; // token sequences that end it
  // Called on the scheduler's thread; must not block.
  std::function<void(request_event)> sink;
  clock::time_point arrival = clock::now();
  clock::time_point deadline = clock::time_point::max();

  // Scheduler state.
  std::vector<int32_t> tokens; // prompt, then every generated token
  std::vector<sampled_token> generated;
  int64_t released = 0; // generated tokens already sent to the sink
  int64_t computed = 0; // positions whose keys and values are cached
  std::vector<int32_t> blocks;
  int32_t rank = 0;   // whose KV cache holds `blocks` (expert parallelism)
  int64_t hashed = 0; // leading blocks registered in the prefix cache
  uint64_t prefix_hash = 0; // chain hash through them
  bool started = false;     // scheduled at least once
  int64_t preemptions = 0;
  clock::time_point first_token_at, last_token_at;
};

} // namespace tutti::serve
