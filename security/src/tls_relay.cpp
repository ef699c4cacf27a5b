#include "tutti/security/tls_relay.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>

namespace tutti::security {

namespace {

constexpr auto write_limit = std::chrono::seconds(60);
constexpr auto recheck_interval = std::chrono::seconds(1);

bool send_all(int fd, const char* data, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + write_limit;
  while (n > 0) {
    auto sent = ::send(fd, data, n, MSG_NOSIGNAL);
    if (sent > 0) {
      data += sent;
      n -= static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (std::chrono::steady_clock::now() >= deadline
          || ::poll(&p, 1, 200) < 0)
        return false;
      continue;
    }
    return false;
  }
  return true;
}

} // namespace

std::string relay(tls_stream& tls, int plain, const std::atomic<bool>& stop,
                  const tls_inspector& inspect, const tls_recheck& recheck) {
  if (!set_nonblocking(plain))
    return "cannot make the loopback socket non-blocking";
  char buf[64 * 1024];
  pollfd fds[2] = {{tls.fd(), POLLIN, 0}, {plain, POLLIN, 0}};
  auto next_check = std::chrono::steady_clock::now() + recheck_interval;
  while (!stop) {
    if (recheck && std::chrono::steady_clock::now() >= next_check) {
      if (auto why = recheck(); !why.empty())
        return why;
      next_check = std::chrono::steady_clock::now() + recheck_interval;
    }
    // Bytes TLS already decrypted do not show on the socket.
    const int wait_ms = tls.pending() ? 0 : 200;
    if (::poll(fds, 2, wait_ms) < 0 && errno != EINTR)
      return "poll failed";
    if (tls.pending() || (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      for (;;) {
        const long n = tls.read(buf, sizeof(buf));
        if (n < 0)
          return "";
        if (n == 0)
          break;
        if (inspect) {
          auto why = inspect(buf, static_cast<size_t>(n));
          if (!why.empty())
            return why;
        }
        if (!send_all(plain, buf, static_cast<size_t>(n)))
          return "";
      }
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      const auto n = ::recv(plain, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
        return "";
      if (n > 0
          && !tls.write_all(
            buf, static_cast<size_t>(n),
            std::chrono::duration_cast<std::chrono::milliseconds>(write_limit)))
        return "";
    }
  }
  return "";
}

} // namespace tutti::security
