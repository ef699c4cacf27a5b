#include "gloo_abort.hpp"

#include <gloo/context.h>
#include <gloo/common/error.h>
#include <gloo/transport/tcp/pair.h>
#include <gloo/transport/tcp/unbound_buffer.h>

#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tutti::comm {
namespace {

using gloo::transport::tcp::Pair;
using gloo::transport::tcp::UnboundBuffer;

// Pointers to the protected members Pair::fd_ and Pair::m_ and
// UnboundBuffer::signalException, taken the one way C++ allows: from inside
// a derived class.
struct pair_access : Pair {
  static int Pair::*socket() { return &pair_access::fd_; }
  static std::mutex Pair::*lock() { return &pair_access::m_; }
};
struct buffer_access : UnboundBuffer {
  using signal_fn = void (UnboundBuffer::*)(std::exception_ptr);
  static signal_fn signal() { return &buffer_access::signalException; }
};

// The pair's lock, held by its event loop while it reads or writes and by
// Gloo's calls on it. It is held only briefly in Gloo's asynchronous mode;
// should it stay taken (a synchronous read holds it), the caller goes on
// without it after 100 ms rather than wait on the very read it must end.
std::unique_lock<std::mutex> lock_pair(Pair& pair) {
  std::unique_lock<std::mutex> guard(pair.*pair_access::lock(),
                                     std::defer_lock);
  for (int i = 0; i < 100 && !guard.try_lock(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return guard;
}

// The pair closes its socket (and its number may be reused at once) under
// its lock: holding it, the number shut down is still the pair's.
void shutdown_pair(Pair& pair) {
  auto guard = lock_pair(pair);
  const int fd = pair.*pair_access::socket();
  if (fd >= 0)
    ::shutdown(fd, SHUT_RDWR);
}

template <class Visit>
void for_each_pair(gloo::Context& context, Visit visit) {
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank)
      continue;
    if (auto* pair = dynamic_cast<Pair*>(context.getPair(peer).get()))
      visit(*pair);
  }
}

} // namespace

void shutdown_gloo_pairs(gloo::Context& context) {
  for_each_pair(context, shutdown_pair);
}

void with_gloo_pairs_locked(gloo::Context& context,
                            const std::function<void()>& body) {
  std::vector<std::unique_lock<std::mutex>> held;
  for_each_pair(context, [&](Pair& pair) { held.push_back(lock_pair(pair)); });
  body();
}

void fail_gloo_buffer(gloo::transport::UnboundBuffer& buffer,
                      const std::string& message) {
  if (auto* tcp = dynamic_cast<UnboundBuffer*>(&buffer))
    (tcp->*buffer_access::signal())(
      std::make_exception_ptr(gloo::IoException(message)));
}

} // namespace tutti::comm
