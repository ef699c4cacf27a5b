#pragma once
// One accepted connection, plain or TLS, as the stream cpp-httplib reads
// requests from and writes answers to. Every wait is a poll with a time
// limit, and the socket is non-blocking, so a stalled client costs a
// bounded time; shutting the socket down from another thread (stop) ends
// every wait at once.

#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>

#include "tutti/security/tls.hpp"

namespace tutti::net::detail {

using clock = std::chrono::steady_clock;

enum class head_read {
  complete,  // a well-formed head is buffered, rewritten with CRLFs
  malformed, // answer 400
  too_large, // answer 400
  incomplete // time out, closed or failed: nobody worth answering
};

struct connection_timeouts {
  std::chrono::milliseconds read, write;
};

class connection : public httplib::Stream {
public:
  // `tls` is null for plain HTTP; the socket is not owned.
  connection(int fd, std::unique_ptr<security::tls_stream> tls,
             connection_timeouts timeouts);

  // Waits up to `first_byte` for a request to begin, then reads its head
  // until `head_limit` after that, keeping at most `max_bytes`.
  head_read read_head(std::chrono::milliseconds first_byte,
                      std::chrono::milliseconds head_limit, size_t max_bytes);
  // Sends all of `bytes` within the write timeout.
  bool send_all(const std::string& bytes);
  // After an answer: says no more, then reads and drops what the client
  // still sends for a moment, because closing with unread input makes the
  // kernel send a reset that can destroy the answer before it is read.
  void finish();

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

private:
  // Appends what arrives before `deadline`; false on time out, close or
  // failure.
  bool fill(clock::time_point deadline);
  bool wait(short events, clock::time_point deadline) const;
  long receive(char* buf, size_t n); // > 0 bytes, 0 would block, -1 gone

  int fd_;
  std::unique_ptr<security::tls_stream> tls_;
  connection_timeouts timeouts_;
  std::string buffer_; // received, not yet read by cpp-httplib
  size_t consumed_ = 0;
};

} // namespace tutti::net::detail
