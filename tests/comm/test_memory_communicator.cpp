// The in-process communicator (comm/memory_communicator.hpp) against Gloo
// over loopback: the same all-to-all results and the same bits for sums
// over 2, 3 and 4 members (both add in member order); the exchange by
// runs lands each run in place; abort releases a
// member stuck on a peer at once, but not one whose peer is still copying
// out of its buffer; a peer that never comes fails the
// collective at its timeout, and a group that never forms fails at join.

#include <catch2/catch.hpp>

#include <gloo/rendezvous/hash_store.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "comm_group.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

// Values of very different magnitudes, so the order of a sum shows.
std::vector<float> values(int member, size_t count) {
  std::mt19937 rng(1000 + member);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(count);
  for (auto& x : v)
    x = u(rng) * std::pow(10.0f, float(rng() % 8));
  return v;
}

std::vector<std::vector<float>> all_reduce(bool memory, int n, size_t count) {
  auto group = make_group(memory, n);
  std::vector<std::vector<float>> data(n);
  for (int r = 0; r < n; ++r)
    data[r] = values(r, count);
  std::vector<status> result(n);
  on_all(n, [&](int r) {
    result[r] = group[r]->all_reduce_sum(data[r].data(), count);
  });
  for (auto& s : result)
    REQUIRE(s.ok());
  return data;
}

} // namespace

TEST_CASE("memory all-reduce gives Gloo's bits on every member", "[unit]") {
  for (int n : {2, 3, 4}) {
    for (size_t count : {size_t(1), size_t(5), size_t(1003)}) {
      INFO(n << " members, " << count << " values");
      const auto mem = all_reduce(true, n, count);
      const auto tcp = all_reduce(false, n, count);
      for (int r = 0; r < n; ++r) {
        CHECK(std::memcmp(mem[r].data(), mem[0].data(), count * 4) == 0);
        CHECK(std::memcmp(mem[r].data(), tcp[r].data(), count * 4) == 0);
      }
      // Member order: ((v0 + v1) + v2) + ...
      const auto expect = [&](size_t i) {
        float s = values(0, count)[i];
        for (int p = 1; p < n; ++p)
          s += values(p, count)[i];
        return s;
      };
      for (size_t i = 0; i < count; ++i)
        CHECK(mem[0][i] == expect(i));
    }
  }
}

TEST_CASE("memory all-to-all-v delivers what Gloo delivers", "[unit]") {
  const int n = 3;
  for (bool memory : {true, false}) {
    auto group = make_group(memory, n);
    // Member r sends (r + 1) * (p + 1) ints to member p, valued r*100 + p.
    std::vector<std::vector<int32_t>> received(n);
    std::vector<status> result(n);
    on_all(n, [&](int r) {
      std::vector<int64_t> send_counts(n), recv_counts(n);
      std::vector<int32_t> send;
      for (int p = 0; p < n; ++p) {
        send_counts[p] = (r + 1) * (p + 1);
        recv_counts[p] = (p + 1) * (r + 1);
        send.insert(send.end(), send_counts[p], r * 100 + p);
      }
      received[r].resize((r + 1) * (1 + 2 + 3));
      result[r] = group[r]->all_to_all_v(send.data(), send_counts,
                                         received[r].data(), recv_counts, 4);
    });
    for (int r = 0; r < n; ++r) {
      REQUIRE(result[r].ok());
      size_t at = 0;
      for (int p = 0; p < n; ++p)
        for (int i = 0; i < (p + 1) * (r + 1); ++i)
          CHECK(received[r][at++] == p * 100 + r);
    }
  }
}

TEST_CASE("memory all-to-all by runs lands each run where the receiver "
          "says, and refuses totals that disagree",
          "[unit]") {
  const int n = 3;
  auto group = make_group(true, n);
  // Member r sends member p the values r*100 + p*10 + i, i = 0..5, from
  // two runs of its buffer (i 0..1 at 10p, i 2..5 at 10p + 4); the
  // receiver takes them into runs of 1, 2 and 3 elements, reversed across
  // the buffer: sender p's values land at 30 - 10p.
  std::vector<std::vector<int32_t>> received(n, std::vector<int32_t>(40, -1));
  std::vector<status> result(n);
  on_all(n, [&](int r) {
    std::vector<int32_t> send(40, -1);
    std::vector<std::vector<comm::slice>> from(n), to(n);
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i < 6; ++i)
        send[10 * p + (i < 2 ? i : i + 2)] = r * 100 + p * 10 + i;
      from[p] = {{10 * p, 2}, {10 * p + 4, 4}};
      to[p] = {{30 - 10 * p, 1}, {30 - 10 * p + 3, 2}, {30 - 10 * p + 6, 3}};
    }
    result[r] = group[r]->all_to_all_runs(send.data(), from, received[r].data(),
                                          to, 4);
  });
  for (int r = 0; r < n; ++r) {
    REQUIRE(result[r].ok());
    for (int p = 0; p < n; ++p) {
      const int at = 30 - 10 * p;
      const int got[] = {received[r][at],     received[r][at + 3],
                         received[r][at + 4], received[r][at + 6],
                         received[r][at + 7], received[r][at + 8]};
      for (int i = 0; i < 6; ++i)
        CHECK(got[i] == p * 100 + r * 10 + i);
      CHECK(received[r][at + 1] == -1); // between the runs: untouched
    }
  }
  // One element fewer expected from every member: each receiver says so.
  on_all(n, [&](int r) {
    std::vector<int32_t> send(40, 0);
    std::vector<std::vector<comm::slice>> from(n, {{0, 6}}), to(n, {{0, 5}});
    result[r] = group[r]->all_to_all_runs(send.data(), from, received[r].data(),
                                          to, 4);
  });
  for (int r = 0; r < n; ++r) {
    REQUIRE_FALSE(result[r].ok());
    CHECK_THAT(result[r].message(),
               Catch::Contains("sends 6 elements, 5 expected"));
  }
}

TEST_CASE("memory abort releases a member waiting on its peer", "[unit]") {
  auto group = make_group(true, 2);
  status stuck;
  std::thread waiter([&] {
    float x = 1;
    stuck = group[0]->all_reduce_sum(&x, 1); // member 1 never comes
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(group[1]->abort().ok()); // from the peer's side, as recovery does
  waiter.join();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  CHECK_FALSE(stuck.ok());
  float y = 1;
  CHECK_FALSE(group[0]->all_reduce_sum(&y, 1).ok());
  CHECK_FALSE(group[1]->barrier().ok());
}

TEST_CASE("memory abort during an exchange waits for the peers' copies",
          "[unit]") {
  // Member 0 reads 128 MiB out of member 1's buffer; member 1 receives
  // nothing and waits for it to finish. An abort while member 0 copies must
  // not let member 1 return (and free its buffer, as an aborted rank does)
  // before member 0 has finished with it.
  auto group = make_group(true, 2);
  const int64_t big = int64_t{128} << 20;
  std::vector<char> send(static_cast<size_t>(big), 1),
    received(static_cast<size_t>(big));
  // Whether any (all) of every MiB's first bytes arrived: memcpy may
  // write a large block in any order.
  const volatile char* in = received.data();
  auto arrived = [&](bool all) {
    for (int64_t i = 0; i < big; i += int64_t{1} << 20)
      if ((in[i] == 1) != all)
        return !all;
    return all && in[big - 1] == 1;
  };
  bool copy_done_when_returned = false;
  status result[2];
  std::thread aborter([&] {
    const auto deadline = std::chrono::steady_clock::now()
                          + std::chrono::seconds(10);
    while (!arrived(false) && std::chrono::steady_clock::now() < deadline) {
    }
    (void)group[1]->abort(); // member 0 is copying now
  });
  on_all(2, [&](int r) {
    char none = 0;
    if (r == 0) {
      result[0] = group[0]->all_to_all_v(&none, {0, 0}, received.data(),
                                         {0, big}, 1);
    } else {
      result[1] = group[1]->all_to_all_v(send.data(), {big, 0}, &none, {0, 0},
                                         1);
      copy_done_when_returned = arrived(true);
    }
  });
  aborter.join();
  CHECK(copy_done_when_returned);
  CHECK(received.back() == 1);
  char x = 0;
  CHECK_FALSE(group[0]->barrier().ok()); // the group stays aborted
  CHECK_FALSE(group[1]->all_to_all_v(&x, {1, 0}, &x, {1, 0}, 1).ok());
}

TEST_CASE("memory collectives and joins end at their deadlines", "[unit]") {
  comm::memory_hub hub(0, 2);
  comm::memory_options o{"late", std::chrono::milliseconds(300),
                         std::chrono::milliseconds(300)};
  comm_ptr alone;
  const auto joined = comm::make_memory_communicator(hub, 0, 2, o, alone);
  REQUIRE_FALSE(joined.ok());
  CHECK(joined.message().find("1 of 2 members joined") != std::string::npos);
  // The group that never formed left the hub: the name starts afresh, here
  // as a group of one.
  comm_ptr single;
  REQUIRE(comm::make_memory_communicator(hub, 0, 1, o, single).ok());
  CHECK(single->size() == 1);

  // A group whose collectives wait 300 ms: a barrier member 1 never joins.
  comm_ptr a, b;
  comm::memory_hub hub2(0, 2);
  comm::memory_options quick{"quick", std::chrono::milliseconds(300),
                             std::chrono::seconds(5)};
  std::thread peer([&] {
    REQUIRE(comm::make_memory_communicator(hub2, 1, 2, quick, b).ok());
  });
  REQUIRE(comm::make_memory_communicator(hub2, 0, 2, quick, a).ok());
  peer.join();
  const auto t0 = std::chrono::steady_clock::now();
  const auto timed_out = a->barrier();
  CHECK_FALSE(timed_out.ok());
  CHECK(timed_out.message().find("timed out") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
  CHECK_FALSE(b->barrier().ok()); // the group is finished for the late one too
}

TEST_CASE("memory all-to-all tells waiting for a late member from the "
          "exchange",
          "[unit]") {
  auto group = make_group(true, 2);
  std::vector<int64_t> counts{256, 256};
  on_all(2, [&](int r) {
    std::vector<float> send(512, static_cast<float>(r)), recv(512);
    if (r == 1) // member 1 is late: member 0 waits for it
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    REQUIRE(
      group[r]
        ->all_to_all_v(send.data(), counts, recv.data(), counts, sizeof(float))
        .ok());
  });
  CHECK(group[0]->waited_s() >= 0.15);
  CHECK(group[1]->waited_s() < 0.1);
  auto gloo = make_group(false, 2);
  CHECK(gloo[0]->waited_s() == 0); // Gloo cannot tell them apart
}
