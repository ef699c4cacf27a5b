// The Gloo communicator's abort() from another thread: a collective stuck
// on a peer that never joins it ends at once with an error (not at its
// timeout), later calls fail too, and the peer's next collective fails
// instead of waiting (comm/src/gloo_abort.cpp).

#include <catch2/catch.hpp>

#include <gloo/rendezvous/hash_store.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tutti/comm/gloo_communicator.hpp"

using namespace tutti;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

} // namespace

TEST_CASE("abort ends a collective stuck on a silent peer at once", "[unit]") {
  gloo::rendezvous::HashStore store;
  comm::gloo_options opts;
  opts.timeout = std::chrono::seconds(30); // far beyond what the test waits
  opts.connect_timeout = std::chrono::seconds(30);
  std::unique_ptr<comm::communicator> a, b;
  status made_b;
  std::thread peer(
    [&] { made_b = comm::make_gloo_communicator(store, 1, 2, opts, b); });
  const auto made_a = comm::make_gloo_communicator(store, 0, 2, opts, a);
  peer.join();
  REQUIRE(made_a.ok());
  REQUIRE(made_b.ok());

  // Member 1 never joins this all-reduce.
  std::atomic<bool> done{false};
  status stuck;
  std::thread waiter([&] {
    float x = 1;
    stuck = a->all_reduce_sum(&x, 1);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(done.load());
  const auto t0 = clock_type::now();
  CHECK(a->abort().ok());
  waiter.join();
  const double ended = seconds_since(t0);
  INFO("the stuck all-reduce ended " << ended << " s after abort()");
  CHECK(ended < 2.0);
  CHECK_FALSE(stuck.ok());

  float y = 1;
  CHECK_FALSE(a->all_reduce_sum(&y, 1).ok());
  // The peer's sockets were shut down from the other end: it fails too,
  // well before its 30 s timeout.
  const auto t1 = clock_type::now();
  float z = 1;
  CHECK_FALSE(b->all_reduce_sum(&z, 1).ok());
  CHECK(seconds_since(t1) < 5.0);
}
