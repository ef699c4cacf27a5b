// The Gloo communicator's abort() from another thread: a collective stuck
// on a peer that never joins it ends at once with an error (not at its
// timeout), later calls fail too, and the peer's next collective fails
// instead of waiting; a buffer it fails ends its wait at once
// (comm/src/gloo_abort.cpp).

#include <catch2/catch.hpp>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "gloo_abort.hpp"
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

TEST_CASE("a failed buffer's waitSend throws at once", "[unit]") {
  // Gloo does not fail a send already queued on its socket when the socket
  // ends, so abort() fails the buffers in flight itself, through a member
  // of Gloo's UnboundBuffer reached with a stand-in header: this shows the
  // stand-in fits the library. Member 1 never receives, so only the
  // failure can end member 0's wait.
  gloo::rendezvous::HashStore store;
  auto device = gloo::transport::tcp::CreateDevice(gloo::transport::tcp::attr("127.0.0.1"));
  std::shared_ptr<gloo::rendezvous::Context> contexts[2] = {
    std::make_shared<gloo::rendezvous::Context>(0, 2),
    std::make_shared<gloo::rendezvous::Context>(1, 2)};
  std::thread peer([&] { contexts[1]->connectFullMesh(store, device); });
  contexts[0]->connectFullMesh(store, device);
  peer.join();

  int64_t value = 7;
  auto buffer = contexts[0]->createUnboundBuffer(&value, sizeof(value));
  buffer->send(1, /*slot=*/42);
  std::string thrown;
  std::thread waiter([&] {
    try {
      buffer->waitSend(std::chrono::seconds(30));
    } catch (const std::exception& e) {
      thrown = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = clock_type::now();
  comm::fail_gloo_buffer(*buffer, "member 0: aborted");
  waiter.join();
  INFO("the wait ended " << seconds_since(t0) << " s after the failure");
  CHECK(seconds_since(t0) < 2.0);
  CHECK(thrown.find("member 0: aborted") != std::string::npos);
}

TEST_CASE("abort ends exchanges under way on both members at once",
          "[unit]") {
  // Two members exchange 16 MiB each way, over and over, until both abort
  // somewhere in the middle, one after the other, as the node supervisors
  // of a job do.
  std::signal(SIGPIPE, SIG_IGN); // Gloo writes to the shut sockets, as in tuttid
  gloo::rendezvous::HashStore store;
  comm::gloo_options opts;
  opts.timeout = std::chrono::seconds(30);
  opts.connect_timeout = std::chrono::seconds(30);
  std::unique_ptr<comm::communicator> members[2];
  status made[2];
  auto connect = [&](gloo::rendezvous::Store& where) {
    std::thread peer([&] {
      made[1] = comm::make_gloo_communicator(where, 1, 2, opts, members[1]);
    });
    made[0] = comm::make_gloo_communicator(where, 0, 2, opts, members[0]);
    peer.join();
    REQUIRE(made[0].ok());
    REQUIRE(made[1].ok());
  };
  connect(store);

  for (int round = 0; round < 3; ++round) {
    std::atomic<int> running{2};
    std::thread exchanges[2];
    for (int m = 0; m < 2; ++m)
      exchanges[m] = std::thread([&, m] {
        const int64_t n = 1 << 21; // int64 each way: 16 MiB
        std::vector<int64_t> send(2 * n, m), recv(2 * n);
        while (members[m]->all_to_all(send.data(), recv.data(), n).ok()) {
        }
        --running;
      });
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + 15 * round));
    const auto t0 = clock_type::now();
    CHECK(members[0]->abort().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(members[1]->abort().ok());
    while (running > 0 && seconds_since(t0) < 40)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const double ended = seconds_since(t0);
    for (auto& t : exchanges)
      t.join();
    INFO("round " << round << ": both exchanges ended " << ended
                  << " s after abort()");
    CHECK(ended < 2.0);
    gloo::rendezvous::HashStore next;
    connect(next);
  }
}
