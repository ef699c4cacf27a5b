// The data plane's membership check: connections to a Gloo listener from
// an address that is not a cluster node's are found (over loopback,
// 127.0.0.2 stands for a stranger), and a communicator with one is refused
// naming the address, while one among members builds and reduces.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <gloo/rendezvous/hash_store.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "tutti/comm/data_plane_peers.hpp"
#include "tutti/comm/gloo_communicator.hpp"

using namespace tutti;

namespace {

// A TCP socket bound to `from` (port 0) and connected to 127.0.0.1:port.
int connect_from(const char* from, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in self{};
  self.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &self.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&self), sizeof(self)) == 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0);
  return fd;
}

} // namespace

TEST_CASE("connections to a data-plane port from non-members are found",
          "[security]") {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  socklen_t len = sizeof(addr);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))
          == 0);
  REQUIRE(::listen(listener, 4) == 0);
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len)
          == 0);
  const uint16_t port = ntohs(addr.sin_port);
  int member = connect_from("127.0.0.1", port);
  int stranger = connect_from("127.0.0.2", port);
  int a = ::accept(listener, nullptr, nullptr);
  int b = ::accept(listener, nullptr, nullptr);
  auto found = comm::non_member_peers(port, {"127.0.0.1"});
  INFO(found.message());
  REQUIRE(found.ok());
  REQUIRE(found.value().size() == 1);
  CHECK(found.value()[0].rfind("127.0.0.2:", 0) == 0);
  auto none = comm::non_member_peers(port, {"127.0.0.1", "127.0.0.2"});
  REQUIRE(none.ok());
  CHECK(none.value().empty());
  for (int fd : {a, b, member, stranger, listener})
    ::close(fd);
}

TEST_CASE("a Gloo communicator is refused when a peer is not a member, and "
          "builds among members",
          "[security]") {
  auto pair = [](const std::vector<std::string>& members, status& made_a,
                 status& made_b) {
    gloo::rendezvous::HashStore store;
    comm::gloo_options opts;
    opts.connect_timeout = std::chrono::seconds(20);
    opts.timeout = std::chrono::seconds(20);
    opts.members = members;
    std::unique_ptr<comm::communicator> a, b;
    std::thread peer(
      [&] { made_b = comm::make_gloo_communicator(store, 1, 2, opts, b); });
    made_a = comm::make_gloo_communicator(store, 0, 2, opts, a);
    peer.join();
    if (made_a.ok() && made_b.ok()) {
      float x = 1, y = 2;
      std::thread other([&] { CHECK(b->all_reduce_sum(&y, 1).ok()); });
      CHECK(a->all_reduce_sum(&x, 1).ok());
      other.join();
      CHECK(x == 3);
    }
  };
  status a, b;
  pair({"127.0.0.1"}, a, b);
  INFO(a.message() << " / " << b.message());
  CHECK(a.ok());
  CHECK(b.ok());
  // The cluster is 127.0.0.3 only: the peer connecting from 127.0.0.1 is
  // a stranger to whichever side accepted its connection.
  pair({"127.0.0.3"}, a, b);
  INFO(a.message() << " / " << b.message());
  CHECK((!a.ok() || !b.ok()));
  const auto why = a.ok() ? b.message() : a.message();
  CHECK(why.find("data-plane connection from 127.0.0.1:") != std::string::npos);
  CHECK(why.find("not a cluster node") != std::string::npos);
}
