#pragma once
// For tests that start `tutti serve` or serving daemons as processes: the
// serve section of their config, a client of the front on loopback, and
// readiness, and a load of completions.

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tutti::testing {

// A small replica's serve section on 127.0.0.1:http_port; `extra` adds
// keys (nodes, placement, ...).
inline std::string serve_yaml(const std::filesystem::path& model, int http_port,
                              const std::string& extra) {
  return "serve:\n  model: " + model.string()
         + "\n  listen: 127.0.0.1:" + std::to_string(http_port)
         + "\n  max_sequences: 8\n  max_batch_tokens: 64\n"
           "  kv_cache_bytes: 4MiB\n  step_timeout_s: 10\n"
         + extra;
}

// The value of the first sample of `name` (any labels) in a /metrics
// scrape; -1 if none.
inline double first_sample(const std::string& text, const std::string& name) {
  const auto at = text.find("\n" + name);
  if (at == std::string::npos)
    return -1;
  const auto end = text.find('\n', at + 1);
  const auto line = text.substr(at + 1, end - at - 1);
  return std::stod(line.substr(line.rfind(' ') + 1));
}

inline httplib::Client local_client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30, 0);
  c.set_connection_timeout(2, 0);
  return c;
}

// GET /ready answers 200: the model is loaded and every shard is up.
inline bool serve_ready(int port) {
  auto r = local_client(port).Get("/ready");
  return r && r->status == 200;
}

// Greedy completions of `max_tokens`, one after another on each of
// `threads` connections, until end(): each one's start, end and answer.
struct completion_load {
  struct done {
    std::chrono::steady_clock::time_point start, end;
    int status = 0;     // 0: no answer (the front closed)
    bool whole = false; // 200 with max_tokens tokens
    std::string problem;
  };
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<done> finished;
  std::vector<std::thread> threads;

  completion_load(int port, int threads_count, int max_tokens) {
    using json = nlohmann::json;
    for (int t = 0; t < threads_count; ++t)
      threads.emplace_back([this, port, t, max_tokens] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(60, 0);
        c.set_connection_timeout(2, 0);
        const json body = {{"prompt", "tutti serves " + std::to_string(t)},
                           {"max_tokens", max_tokens},
                           {"temperature", 0}};
        while (!stop) {
          done d;
          d.start = std::chrono::steady_clock::now();
          auto r = c.Post("/v1/completions", body.dump(), "application/json");
          d.end = std::chrono::steady_clock::now();
          if (!r) {
            d.problem = httplib::to_string(r.error());
          } else {
            d.status = r->status;
            auto j = json::parse(r->body, nullptr, false);
            d.whole = r->status == 200 && j.is_object()
                      && j["choices"][0]["token_ids"].size()
                           == size_t(max_tokens);
            if (!d.whole)
              d.problem = std::to_string(r->status) + " " + r->body;
          }
          {
            std::lock_guard lock(mutex);
            finished.push_back(d);
          }
          if (!r) // the front is gone: do not spin
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      });
  }
  ~completion_load() { end(); }
  void end() {
    stop = true;
    for (auto& t : threads)
      if (t.joinable())
        t.join();
  }
  size_t count() {
    std::lock_guard lock(mutex);
    return finished.size();
  }
};

} // namespace tutti::testing
