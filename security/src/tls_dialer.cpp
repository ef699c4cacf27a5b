#include "tutti/security/tls_dialer.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "tutti/security/tls_relay.hpp"

namespace tutti::security::tls_dialer {

namespace {

// A TCP connection to host:port within `limit`, or -1 and why.
int connect_remote(const std::string& host, uint16_t port,
                   std::chrono::milliseconds limit, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                             &found);
      rc != 0) {
    why = std::string("cannot resolve: ") + gai_strerror(rc);
    return -1;
  }
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || !set_nonblocking(fd)) {
    why = "no socket";
    ::freeaddrinfo(found);
    if (fd >= 0)
      ::close(fd);
    return -1;
  }
  int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    if (::poll(&p, 1, static_cast<int>(limit.count())) == 1
        && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
      rc = err == 0 ? 0 : -1, errno = err;
    else
      rc = -1, errno = ETIMEDOUT;
  }
  if (rc != 0) {
    why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

struct forwarder {
  std::string host;
  uint16_t remote_port = 0;
  uint16_t local_port = 0;
  int listener = -1;
  std::thread acceptor;
};

struct dialer {
  std::mutex mutex;
  std::shared_ptr<tls_endpoint> client;
  std::chrono::milliseconds limit{5000};
  secret token;
  std::map<std::string, std::unique_ptr<forwarder>> forwarders;
  std::map<std::string, std::string> failures;
  struct connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<connection> connections;
  std::atomic<bool> stop{false};

  ~dialer() { close_all(); }

  void close_all() {
    stop = true;
    std::map<std::string, std::unique_ptr<forwarder>> fs;
    std::list<connection> cs;
    {
      std::lock_guard<std::mutex> lock(mutex);
      fs.swap(forwarders);
    }
    for (auto& [key, f] : fs) {
      if (f->acceptor.joinable())
        f->acceptor.join();
      ::close(f->listener);
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      cs.swap(connections);
    }
    for (auto& c : cs)
      c.thread.join();
    stop = false;
  }

  void fail(const std::string& key, const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    failures[key] = why;
  }

  void carry(int local, forwarder* f) {
    const auto key = f->host + ":" + std::to_string(f->remote_port);
    std::shared_ptr<tls_endpoint> endpoint;
    std::chrono::milliseconds handshake_limit;
    secret token_now;
    {
      std::lock_guard<std::mutex> lock(mutex);
      endpoint = client;
      handshake_limit = limit;
      token_now = token;
    }
    std::string why;
    int remote = connect_remote(f->host, f->remote_port, handshake_limit, why);
    if (remote < 0) {
      fail(key, why);
      ::close(local);
      return;
    }
    auto tls = tls_stream::handshake(endpoint->context(), remote,
                                     tls_role::client, handshake_limit);
    if (!tls) {
      fail(key, tls.message());
    } else if ((*tls)->peer().kind != identity_kind::node) {
      fail(key, "the peer's certificate names " + (*tls)->peer().text()
                  + ", not a node");
    } else if (!token_now.empty()
               && !(*tls)->write_all(
                 ("TUTTI-TOKEN " + token_now.reveal() + "\n").data(),
                 token_now.reveal().size() + 13, handshake_limit)) {
      fail(key, "could not send the token");
    } else {
      fail(key, "");
      auto& stream = **tls;
      auto why = relay(stream, local, stop, {},
                       [&] { return stream.recheck(*endpoint); });
      if (!why.empty())
        fail(key, why);
    }
    tls = status::error("closed"); // the TLS connection goes first
    ::close(remote);
    ::close(local);
  }

  void accept_loop(forwarder* f) {
    while (!stop) {
      pollfd p{f->listener, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0)
        continue;
      int local = ::accept4(f->listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (local < 0)
        continue;
      int one = 1;
      ::setsockopt(local, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::lock_guard<std::mutex> lock(mutex);
      // Reap the connections that ended (a long-lived daemon reconnects).
      for (auto i = connections.begin(); i != connections.end();)
        if (*i->done) {
          i->thread.join();
          i = connections.erase(i);
        } else {
          ++i;
        }
      auto done = std::make_shared<std::atomic<bool>>(false);
      connections.push_back({std::thread([this, local, f, done] {
                               carry(local, f);
                               *done = true;
                             }),
                             done});
    }
  }
};

dialer& the_dialer() {
  static dialer d;
  return d;
}

} // namespace

void install(std::shared_ptr<tls_endpoint> client,
             std::chrono::milliseconds handshake_limit, const secret& token) {
  auto& d = the_dialer();
  std::lock_guard<std::mutex> lock(d.mutex);
  d.client = std::move(client);
  d.limit = handshake_limit;
  d.token = token;
}

bool installed() {
  auto& d = the_dialer();
  std::lock_guard<std::mutex> lock(d.mutex);
  return static_cast<bool>(d.client);
}

expected<address> route(const std::string& host, uint16_t port) {
  auto& d = the_dialer();
  std::lock_guard<std::mutex> lock(d.mutex);
  if (!d.client)
    return address{host, port};
  const auto key = host + ":" + std::to_string(port);
  if (auto i = d.forwarders.find(key); i != d.forwarders.end())
    return address{"127.0.0.1", i->second->local_port};
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))
      || ::listen(fd, 64)
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len)) {
    auto why = std::string(std::strerror(errno));
    if (fd >= 0)
      ::close(fd);
    return status::error("cannot open a TLS forwarder on loopback: " + why);
  }
  auto f = std::make_unique<forwarder>();
  f->host = host;
  f->remote_port = port;
  f->local_port = ntohs(addr.sin_port);
  f->listener = fd;
  auto* raw = f.get();
  f->acceptor = std::thread([&d, raw] { d.accept_loop(raw); });
  d.forwarders[key] = std::move(f);
  return address{"127.0.0.1", raw->local_port};
}

std::string last_failure(const std::string& host, uint16_t port) {
  auto& d = the_dialer();
  std::lock_guard<std::mutex> lock(d.mutex);
  auto i = d.failures.find(host + ":" + std::to_string(port));
  return i == d.failures.end() ? "" : i->second;
}

void shutdown() { the_dialer().close_all(); }

} // namespace tutti::security::tls_dialer
