#include "connection.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "request_head.hpp"

namespace tutti::net::detail {

namespace {

// After an answer, how long and how much of the client's further input is
// read and dropped before the socket closes.
constexpr auto linger_limit = std::chrono::milliseconds(250);
constexpr size_t linger_max_bytes = 64 * 1024;

int millis_until(clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - clock::now())
                      .count();
  return left < 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

bool would_block() {
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

void numeric_address(const sockaddr_storage& addr, socklen_t len,
                     std::string& ip, int& port) {
  if (addr.ss_family == AF_INET)
    port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  else if (addr.ss_family == AF_INET6)
    port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  else
    return;
  std::array<char, NI_MAXHOST> text{};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, text.data(),
                    static_cast<socklen_t>(text.size()), nullptr, 0,
                    NI_NUMERICHOST)
      == 0)
    ip = text.data();
}

} // namespace

connection::connection(int fd, std::unique_ptr<security::tls_stream> tls,
                       connection_timeouts timeouts)
  : fd_(fd), tls_(std::move(tls)), timeouts_(timeouts) {
  security::set_nonblocking(fd_);
}

bool connection::wait(short events, clock::time_point deadline) const {
  for (;;) {
    pollfd p{fd_, events, 0};
    const int n = ::poll(&p, 1, millis_until(deadline));
    if (n < 0 && errno == EINTR)
      continue;
    // Ready includes a hang-up or an error: the next read or write says so.
    return n > 0;
  }
}

long connection::receive(char* buf, size_t n) {
  if (tls_)
    return tls_->read(buf, n);
  const ssize_t got = ::recv(fd_, buf, n, 0);
  if (got > 0)
    return got;
  return got < 0 && would_block() ? 0 : -1;
}

bool connection::fill(clock::time_point deadline) {
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  }
  char chunk[16 * 1024];
  for (;;) {
    // TLS may hold decrypted bytes the socket no longer shows.
    if (!(tls_ && tls_->pending()) && !wait(POLLIN, deadline))
      return false;
    const long got = receive(chunk, sizeof chunk);
    if (got > 0) {
      buffer_.append(chunk, static_cast<size_t>(got));
      return true;
    }
    if (got < 0 || clock::now() >= deadline)
      return false;
    // 0: woken without a whole TLS record yet; wait for the rest.
  }
}

head_read connection::read_head(std::chrono::milliseconds first_byte,
                                std::chrono::milliseconds head_limit,
                                size_t max_bytes) {
  // What is left of the previous request's bytes may already begin this
  // one (a pipelining client).
  buffer_.erase(0, consumed_);
  consumed_ = 0;
  if (buffer_.empty() && !fill(clock::now() + first_byte))
    return head_read::incomplete;
  const auto deadline = clock::now() + head_limit;
  for (;;) {
    const auto end = find_head_end(buffer_);
    if (end.found()) {
      if (end.total() > max_bytes)
        return head_read::too_large;
      auto head = canonical_head(std::string_view(buffer_).substr(0, end.at));
      if (!head)
        return head_read::malformed;
      buffer_.replace(0, end.total(), *head);
      return head_read::complete;
    }
    if (buffer_.size() > max_bytes)
      return head_read::too_large;
    if (!fill(deadline))
      return head_read::incomplete;
  }
}

bool connection::send_all(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = write(bytes.data() + sent, bytes.size() - sent);
    if (n <= 0)
      return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

void connection::finish() {
  tls_.reset(); // its close_notify goes first
  ::shutdown(fd_, SHUT_WR);
  const auto deadline = clock::now() + linger_limit;
  size_t dropped = 0;
  char chunk[4096];
  while (dropped < linger_max_bytes && wait(POLLIN, deadline)) {
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0 && would_block())
      continue;
    if (n <= 0)
      return;
    dropped += static_cast<size_t>(n);
  }
}

bool connection::is_readable() const {
  return consumed_ < buffer_.size() || (tls_ && tls_->pending())
         || wait(POLLIN, clock::now() + timeouts_.read);
}

bool connection::is_writable() const {
  if (!wait(POLLOUT, clock::now() + timeouts_.write))
    return false;
  // Still there? A streaming answer's producer asks this to notice a
  // client that went away (its end of the socket is closed: a peek reads
  // 0 bytes).
  char byte;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && would_block());
}

ssize_t connection::read(char* ptr, size_t size) {
  if (consumed_ == buffer_.size() && !fill(clock::now() + timeouts_.read))
    return -1;
  const size_t n = std::min(size, buffer_.size() - consumed_);
  std::memcpy(ptr, buffer_.data() + consumed_, n);
  consumed_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t connection::write(const char* ptr, size_t size) {
  if (tls_)
    return tls_->write_all(ptr, size, timeouts_.write)
             ? static_cast<ssize_t>(size)
             : -1;
  const auto deadline = clock::now() + timeouts_.write;
  for (;;) {
    const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    if (n >= 0)
      return n;
    if (!would_block() || !wait(POLLOUT, deadline))
      return -1;
  }
}

void connection::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    numeric_address(addr, len, ip, port);
}

void connection::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    numeric_address(addr, len, ip, port);
}

} // namespace tutti::net::detail
