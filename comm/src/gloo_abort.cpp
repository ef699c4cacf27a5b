#include "gloo_abort.hpp"

#include <gloo/context.h>
#include <gloo/transport/tcp/pair.h>

#include <sys/socket.h>

namespace tutti::comm {
namespace {

// A pointer to the protected member Pair::fd_, taken the one way C++
// allows: from inside a derived class.
struct pair_socket : gloo::transport::tcp::Pair {
  static int gloo::transport::tcp::Pair::*member() { return &pair_socket::fd_; }
};

} // namespace

void shutdown_gloo_pairs(gloo::Context& context) {
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank)
      continue;
    auto* pair =
      dynamic_cast<gloo::transport::tcp::Pair*>(context.getPair(peer).get());
    if (!pair)
      continue;
    const int fd = pair->*pair_socket::member();
    if (fd >= 0)
      ::shutdown(fd, SHUT_RDWR);
  }
}

} // namespace tutti::comm
