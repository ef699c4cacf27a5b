// The NCCL communicator on this machine's GPUs (label gpu): one rank per
// GPU, each on its own thread, rendezvous through a Gloo HashStore as the
// coordinator's store would do it. On a one-GPU machine that is one rank
// (init, staging, self-copy and abort still run; NCCL refuses two ranks on
// one GPU). Exits 77 (CTest: skipped) where no device answers.

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <gloo/rendezvous/hash_store.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tutti/comm/nccl_communicator.hpp"
#include "tutti/kernels/device_memory.hpp"

namespace k = tutti::kernels;
namespace c = tutti::comm;

namespace {

int ranks = 1;

// What one rank saw; checked on the main thread (Catch is not thread-safe).
struct rank_result {
  std::string error;
  std::vector<float> reduced_device;
  std::vector<int64_t> reduced_host;
  std::vector<int64_t> a2a_host, a2a_device;
  bool refused_after_abort = false;
};

// Member r sends p + 1 values r * 100 + p to member p.
std::vector<int64_t> a2a_payload(int r, int size,
                                 std::vector<int64_t>& send_counts,
                                 std::vector<int64_t>& recv_counts) {
  std::vector<int64_t> send;
  send_counts.assign(size, 0);
  recv_counts.assign(size, r + 1);
  for (int p = 0; p < size; ++p) {
    send_counts[p] = p + 1;
    for (int i = 0; i <= p; ++i)
      send.push_back(r * 100 + p);
  }
  return send;
}

void run_rank(gloo::rendezvous::Store& store, int r, rank_result& out) {
  auto fail = [&](const tutti::status& st) {
    out.error = st.message();
    return !st.ok();
  };
  k::cuda_set_device(r);
  k::device_stream ks;
  c::nccl_options opt;
  opt.group = "test/epoch-1";
  opt.device = r;
  opt.stream = ks.handle();
  opt.timeout = std::chrono::milliseconds(60000);
  std::unique_ptr<c::nccl_communicator> comm;
  if (fail(c::make_nccl_communicator(store, r, ranks, opt, comm)))
    return;

  // all-reduce, device buffer
  std::vector<float> host(1000, float(r + 1));
  k::device_array<float> dev(host.size());
  k::copy_to_device(ks.get(), dev.data(), host.data(), dev.bytes());
  if (fail(comm->all_reduce_sum(dev.data(), host.size())))
    return;
  out.reduced_device.resize(host.size());
  k::copy_to_host(ks.get(), out.reduced_device.data(), dev.data(), dev.bytes());

  // all-reduce, host buffer (staged)
  out.reduced_host.assign(16, r + 1);
  if (fail(comm->all_reduce_sum(out.reduced_host.data(), 16)))
    return;

  // all-to-all-v, host then device buffers
  std::vector<int64_t> sc, rc;
  const std::vector<int64_t> send = a2a_payload(r, ranks, sc, rc);
  out.a2a_host.assign(size_t(ranks) * (r + 1), -1);
  if (fail(comm->all_to_all_v(send.data(), sc, out.a2a_host.data(), rc, 8)))
    return;
  k::device_array<int64_t> dsend(send.size()), drecv(out.a2a_host.size());
  k::copy_to_device(ks.get(), dsend.data(), send.data(), dsend.bytes());
  if (fail(comm->all_to_all_v(dsend.data(), sc, drecv.data(), rc, 8)))
    return;
  out.a2a_device.resize(drecv.size());
  k::copy_to_host(ks.get(), out.a2a_device.data(), drecv.data(), drecv.bytes());

  if (fail(comm->barrier()))
    return;
  // After abort every call is refused with an error, not a hang.
  if (fail(comm->abort()))
    return;
  out.refused_after_abort = !comm->all_reduce_sum(dev.data(), 1).ok();
}

} // namespace

TEST_CASE("nccl communicator collectives and abort", "[gpu][comm]") {
  gloo::rendezvous::HashStore store;
  std::vector<rank_result> results(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        run_rank(store, r, results[r]);
      } catch (const std::exception& e) {
        results[r].error = e.what();
      }
    });
  for (auto& t : threads)
    t.join();

  const float sum = float(ranks * (ranks + 1) / 2);
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    REQUIRE(results[r].error == "");
    CHECK(results[r].reduced_device == std::vector<float>(1000, sum));
    CHECK(results[r].reduced_host == std::vector<int64_t>(16, int64_t(sum)));
    std::vector<int64_t> expect;
    for (int p = 0; p < ranks; ++p)
      for (int i = 0; i <= r; ++i)
        expect.push_back(p * 100 + r);
    CHECK(results[r].a2a_host == expect);
    CHECK(results[r].a2a_device == expect);
    CHECK(results[r].refused_after_abort);
  }
}

int main(int argc, char** argv) {
  auto usable = c::nccl_built();
  if (usable)
    usable = k::cuda_device_available();
  if (!usable) {
    std::printf("SKIPPED test_nccl_communicator: %s\n",
                usable.message().c_str());
    return 77;
  }
  ranks = std::min(k::cuda_device_count(), 8);
  std::printf("device: %s; %d rank(s), one per GPU\n",
              k::cuda_device_description().c_str(), ranks);
  return Catch::Session().run(argc, argv);
}
