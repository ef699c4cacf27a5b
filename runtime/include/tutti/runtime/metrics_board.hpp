#pragma once
// Where an actor leaves its latest Prometheus text for the daemon's
// /metrics server thread to read: actors write it when their numbers
// change, the server never blocks them.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace tutti {

class metrics_board {
public:
  void publish(std::string text) {
    std::lock_guard<std::mutex> guard(mutex_);
    text_ = std::move(text);
  }
  std::string read() const {
    std::lock_guard<std::mutex> guard(mutex_);
    return text_;
  }

private:
  mutable std::mutex mutex_;
  std::string text_;
};

// This process's resident memory in bytes (/proc/self/statm), 0 if unknown.
int64_t resident_memory_bytes();

} // namespace tutti
