#pragma once
// The connections a server is serving, each idle (waiting for a request or
// in its TLS handshake) or busy (a request in progress), so that stop()
// can close the idle ones at once and let the busy ones finish.

#include <sys/socket.h>

#include <map>
#include <mutex>

namespace tutti::net::detail {

class connection_registry {
public:
  // A new connection, idle; false once stopping (close it unserved).
  bool enter(int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_)
      return false;
    busy_[fd] = false;
    return true;
  }
  // Between requests; false once stopping.
  bool idle(int fd) { return mark(fd, false); }
  // A request head has come; false once stopping (stop() may already have
  // shut the socket down).
  bool busy(int fd) { return mark(fd, true); }
  void leave(int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    busy_.erase(fd);
  }
  bool stopping() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stopping_;
  }
  // Shutting an idle socket down wakes its thread's poll; the thread
  // closes it (never here: its number could be reused meanwhile).
  void stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (const auto& [fd, busy] : busy_)
      if (!busy)
        ::shutdown(fd, SHUT_RDWR);
  }

private:
  bool mark(int fd, bool busy) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_)
      return false;
    busy_[fd] = busy;
    return true;
  }

  mutable std::mutex mutex_;
  bool stopping_ = false;
  std::map<int, bool> busy_; // fd -> a request in progress
};

} // namespace tutti::net::detail
