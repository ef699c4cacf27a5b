// Mutual TLS 1.3 handshake time per connection (EC P-256 node
// certificates, the endpoints tuttid uses), over loopback TCP, next to the
// anchor of a plain TCP connect + accept in the same run.
// Prints: figure | value | anchor | anchor value | ratio.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "tutti/security/certs.hpp"
#include "tutti/security/tls.hpp"

using namespace tutti::security;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace {

int listen_loopback(uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0
      || ::listen(fd, 16) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  port = ntohs(a.sin_port);
  return fd;
}

int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 ? fd
                                                                        : -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 200;
  auto dir = fs::temp_directory_path()
             / ("tutti-bench-tls-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  if (!init_ca(dir.string(), 1).ok())
    return 1;
  identity node;
  node.kind = identity_kind::node;
  for (int64_t n : {0, 1}) {
    node.node_rank = n;
    if (!issue_certificate(dir.string(), node, 3600).ok())
      return 1;
  }
  const auto files = [&](int n) {
    const auto stem = (dir / ("node-" + std::to_string(n))).string();
    return tls_files{(dir / "ca.crt").string(), stem + ".crt", stem + ".key",
                     "", ""};
  };
  auto server = tls_endpoint::load(files(0), tls_role::server);
  auto client = tls_endpoint::load(files(1), tls_role::client);
  if (!server || !client) {
    std::fprintf(stderr, "cannot load the certificates\n");
    return 1;
  }
  uint16_t port = 0;
  int listener = listen_loopback(port);
  std::vector<double> tls_ms, tcp_ms;
  for (int i = 0; i < 2 * rounds; ++i) {
    const bool with_tls = i % 2 == 0; // interleaved with the anchor
    const auto t0 = clock_type::now();
    int peer = -1;
    std::thread acceptor([&] {
      peer = ::accept(listener, nullptr, nullptr);
      if (with_tls)
        (void)tls_stream::handshake((*server)->context(), peer,
                                    tls_role::server, std::chrono::seconds(5));
    });
    int fd = connect_loopback(port);
    bool ok = fd >= 0;
    if (with_tls && ok)
      ok = tls_stream::handshake((*client)->context(), fd, tls_role::client,
                                 std::chrono::seconds(5))
             .ok();
    acceptor.join();
    const double ms =
      std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    ::close(fd);
    ::close(peer);
    if (!ok) {
      std::fprintf(stderr, "handshake failed\n");
      return 1;
    }
    (with_tls ? tls_ms : tcp_ms).push_back(ms);
  }
  ::close(listener);
  fs::remove_all(dir);
  const double tls = median(tls_ms), tcp = median(tcp_ms);
  std::printf("figure | value | anchor | anchor value | ratio\n");
  std::printf("mutual TLS 1.3 connect + handshake (median of %d) | %.3f ms | "
              "plain TCP connect + accept | %.3f ms | %.1f\n",
              rounds, tls, tcp, tls / tcp);
  return 0;
}
