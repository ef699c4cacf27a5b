#include "tutti/runtime/basp_guard.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "tutti/runtime/log.hpp"
#include "tutti/security/peer_registry.hpp"
#include "tutti/security/tls_relay.hpp"

namespace tutti {

namespace {

constexpr size_t header_size = 32;    // caf::io::basp::header_size
constexpr uint8_t last_operation = 6; // heartbeat
constexpr size_t max_connections = 256;

// Checks the stream of BASP messages from the peer, header by header.
class basp_reader {
public:
  // Feeds received bytes; returns "" or why the peer is refused.
  std::string feed(const char* data, size_t n) {
    size_t i = 0;
    while (i < n) {
      if (payload_left_ > 0) {
        size_t take = std::min<size_t>(payload_left_, n - i);
        payload_left_ -= take;
        i += take;
        continue;
      }
      size_t take = std::min(header_size - header_.size(), n - i);
      header_.insert(header_.end(), data + i, data + i + take);
      i += take;
      if (header_.size() < header_size)
        continue;
      const auto op = static_cast<uint8_t>(header_[0]);
      uint32_t len = 0;
      std::memcpy(&len, header_.data() + 4, 4);
      len = ntohl(len); // CAF serialises in network byte order
      header_.clear();
      const bool handshake = op <= 1;
      if (op > last_operation)
        return "not a BASP message (operation " + std::to_string(op) + ")";
      if (first_ && !handshake)
        return "no handshake first";
      if (handshake && len == 0)
        return "handshake without payload";
      if (len > basp_guard::max_payload)
        return "payload of " + std::to_string(len) + " bytes announced";
      first_ = false;
      payload_left_ = len;
    }
    return "";
  }

private:
  std::vector<char> header_;
  uint64_t payload_left_ = 0;
  bool first_ = true;
};

bool send_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    auto sent = ::send(fd, data, n, MSG_NOSIGNAL);
    if (sent <= 0)
      return false;
    data += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

uint16_t local_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return 0;
  return ntohs(addr.sin_port);
}

} // namespace

struct basp_guard::impl {
  int listener = -1;
  uint16_t backend = 0;
  std::string where;
  tls_options tls;
  std::atomic<bool> stop{false};
  std::atomic<size_t> open{0};
  std::thread acceptor;
  std::mutex mutex;
  std::list<std::thread> relays;

  // A client without a certificate: the token line it sends first, within
  // the handshake limit. Returns who it names, or why it is refused; the
  // bytes after the line go to `rest`.
  expected<security::identity> read_token(security::tls_stream& stream,
                                          std::string& rest) {
    constexpr size_t max_line = 512;
    const std::string prefix = "TUTTI-TOKEN ";
    const auto deadline = std::chrono::steady_clock::now()
                          + tls.handshake_limit;
    std::string line;
    char buf[max_line];
    while (line.find('\n') == std::string::npos && line.size() < max_line) {
      const long n = stream.read(buf, sizeof(buf));
      if (n < 0)
        return status::error("closed before showing a token");
      if (n > 0) {
        line.append(buf, static_cast<size_t>(n));
        continue;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      pollfd p{stream.fd(), POLLIN, 0};
      if (left.count() <= 0
          || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        return status::error("no certificate and no token in time");
    }
    const auto end = line.find('\n');
    if (end == std::string::npos || line.compare(0, prefix.size(), prefix) != 0)
      return status::error("no certificate and no token");
    security::secret token(line.substr(prefix.size(), end - prefix.size()));
    rest = line.substr(end + 1);
    auto who = tls.token_identity(token);
    if (!who)
      return status::error("a token the policy does not hold");
    return *who;
  }

  // TLS first, then the same BASP checks on the decrypted stream.
  void relay_tls(int peer, const std::string& from) {
    auto tls_stream = security::tls_stream::handshake(
      tls.endpoint->context(), peer, security::tls_role::server,
      tls.handshake_limit, static_cast<bool>(tls.token_identity));
    if (!tls_stream) {
      log_warn("basp_guard", "refused a connection from " + from + " to "
                               + where + ": " + tls_stream.message());
      return;
    }
    auto who = (*tls_stream)->peer();
    std::string rest; // bytes that came with the token line
    if (!(*tls_stream)->peer_has_certificate()) {
      auto named = read_token(**tls_stream, rest);
      if (!named) {
        log_warn("basp_guard", "refused a connection from " + from + " to "
                                 + where + ": " + named.message());
        return;
      }
      who = *named;
    }
    int inner = connect_loopback(backend);
    if (inner < 0)
      return;
    const auto port = local_port(inner);
    security::peer_registry::add(port, {who, from});
    basp_reader reader;
    if (!rest.empty()
        && (!reader.feed(rest.data(), rest.size()).empty()
            || !send_all(inner, rest.data(), rest.size()))) {
      security::peer_registry::remove(port);
      ::close(inner);
      return;
    }
    auto& stream = **tls_stream;
    auto why = security::relay(
      stream, inner, stop,
      [&](const char* data, size_t n) { return reader.feed(data, n); },
      [&] { return stream.recheck(*tls.endpoint); });
    if (!why.empty())
      log_warn("basp_guard", "closed a connection of " + who.text() + " from "
                               + from + " to " + where + ": " + why);
    tls_stream = status::error("closed"); // before its socket
    security::peer_registry::remove(port);
    ::close(inner);
  }

  void relay(int peer, std::string from) {
    if (tls.endpoint) {
      relay_tls(peer, from);
      ::close(peer);
      --open;
      return;
    }
    int inner = connect_loopback(backend);
    if (inner >= 0) {
      basp_reader reader;
      char buf[64 * 1024];
      pollfd fds[2] = {{peer, POLLIN, 0}, {inner, POLLIN, 0}};
      while (!stop) {
        if (::poll(fds, 2, 200) < 0)
          break;
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
          auto n = ::recv(peer, buf, sizeof(buf), 0);
          if (n <= 0)
            break;
          auto why = reader.feed(buf, static_cast<size_t>(n));
          if (!why.empty()) {
            log_warn("basp_guard", "closed a connection from " + from + " to "
                                     + where + ": " + why);
            break;
          }
          if (!send_all(inner, buf, static_cast<size_t>(n)))
            break;
        }
        if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
          auto n = ::recv(inner, buf, sizeof(buf), 0);
          if (n <= 0 || !send_all(peer, buf, static_cast<size_t>(n)))
            break;
        }
      }
      ::close(inner);
    }
    ::close(peer);
    --open;
  }

  void accept_loop() {
    while (!stop) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0)
        continue;
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      int peer = ::accept(listener, reinterpret_cast<sockaddr*>(&addr), &len);
      if (peer < 0)
        continue;
      if (open >= max_connections) {
        ::close(peer);
        continue;
      }
      char host[NI_MAXHOST] = "?";
      ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host),
                    nullptr, 0, NI_NUMERICHOST);
      int one = 1;
      ::setsockopt(peer, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ++open;
      std::lock_guard<std::mutex> guard(mutex);
      relays.emplace_back(
        [this, peer, from = std::string(host)] { relay(peer, from); });
    }
  }
};

basp_guard::basp_guard(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

basp_guard::~basp_guard() {
  impl_->stop = true;
  if (impl_->acceptor.joinable())
    impl_->acceptor.join();
  for (auto& t : impl_->relays)
    t.join();
  ::close(impl_->listener);
}

status basp_guard::start(const std::string& host, uint16_t port,
                         uint16_t backend_port,
                         std::unique_ptr<basp_guard>& out, tls_options tls) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  auto where = host + ":" + std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                             &found);
      rc != 0)
    return status::error("cannot resolve " + where + ": " + gai_strerror(rc));
  int fd = ::socket(found->ai_family, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0
      || ::listen(fd, 64) != 0) {
    auto why = std::string(std::strerror(errno));
    ::freeaddrinfo(found);
    ::close(fd);
    return status::error("cannot listen on " + where + ": " + why);
  }
  ::freeaddrinfo(found);
  auto p = std::make_unique<impl>();
  p->listener = fd;
  p->backend = backend_port;
  p->where = where;
  p->tls = std::move(tls);
  auto* raw = p.get();
  p->acceptor = std::thread([raw] { raw->accept_loop(); });
  out.reset(new basp_guard(std::move(p)));
  return {};
}

} // namespace tutti
