// The NCCL communicator with several ranks on one GPU (label gpu), so sends,
// receives and a dead peer are exercised on a one-GPU machine. NCCL refuses
// two members of one communicator on one GPU of one host ("Duplicate GPU
// detected"), so each rank is its own process with its own NCCL_HOSTID:
// NCCL then takes them for separate hosts and connects them through its
// socket transport over loopback. Rendezvous goes through a Gloo FileStore.
//
// Each rank checks all-reduce (device and host buffers), all-to-all-v with
// uneven counts (host and device), the barrier, and then the failure
// paths on a second communicator: the last rank never joins a collective
// and aborts, rank 0 is aborted from another thread while it waits, the
// others time out; every one returns an error in bounded time and refuses
// later calls. Exits 77 (CTest: skipped) where no device answers.

#include <gloo/rendezvous/file_store.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tutti/comm/nccl_communicator.hpp"
#include "tutti/kernels/device_memory.hpp"

namespace k = tutti::kernels;
namespace c = tutti::comm;
using namespace std::chrono_literals;

namespace {

constexpr int kRanks = 3;
int failures = 0;

void check(bool ok, int rank, const std::string& what) {
  std::printf("rank %d: %s: %s\n", rank, ok ? "ok" : "FAILED", what.c_str());
  std::fflush(stdout);
  if (!ok)
    ++failures;
}

std::unique_ptr<c::nccl_communicator> connect(gloo::rendezvous::Store& store,
                                              int rank, const char* group,
                                              std::chrono::milliseconds timeout,
                                              void* stream) {
  c::nccl_options opt;
  opt.group = group;
  opt.device = 0;
  opt.stream = stream;
  opt.timeout = timeout;
  std::unique_ptr<c::nccl_communicator> comm;
  const tutti::status st =
    c::make_nccl_communicator(store, rank, kRanks, opt, comm);
  check(st.ok(), rank, std::string("connect ") + group + " " + st.message());
  return comm;
}

void collectives(c::communicator& comm, const k::device_stream& ks, int r) {
  const int64_t sum = kRanks * (kRanks + 1) / 2;
  std::vector<float> host(1000, float(r + 1));
  k::device_array<float> dev(host.size());
  k::copy_to_device(ks.get(), dev.data(), host.data(), dev.bytes());
  tutti::status st = comm.all_reduce_sum(dev.data(), host.size());
  std::vector<float> back(host.size());
  k::copy_to_host(ks.get(), back.data(), dev.data(), dev.bytes());
  check(st.ok() && back == std::vector<float>(1000, float(sum)), r,
        "all-reduce, device buffer " + st.message());

  std::vector<int64_t> counts(16, r + 1);
  st = comm.all_reduce_sum(counts.data(), counts.size());
  check(st.ok() && counts == std::vector<int64_t>(16, sum), r,
        "all-reduce, host buffer " + st.message());

  // Member r sends p + 1 values r * 100 + p to member p.
  std::vector<int64_t> send, sc(kRanks), rc(kRanks, r + 1), expect;
  for (int p = 0; p < kRanks; ++p) {
    sc[p] = p + 1;
    for (int i = 0; i <= p; ++i)
      send.push_back(r * 100 + p);
    for (int i = 0; i <= r; ++i)
      expect.push_back(p * 100 + r);
  }
  std::vector<int64_t> recv(expect.size(), -1);
  st = comm.all_to_all_v(send.data(), sc, recv.data(), rc, sizeof(int64_t));
  check(st.ok() && recv == expect, r, "all-to-all-v, host " + st.message());

  k::device_array<int64_t> dsend(send.size()), drecv(recv.size());
  k::copy_to_device(ks.get(), dsend.data(), send.data(), dsend.bytes());
  st = comm.all_to_all_v(dsend.data(), sc, drecv.data(), rc, sizeof(int64_t));
  std::vector<int64_t> dback(recv.size(), -1);
  k::copy_to_host(ks.get(), dback.data(), drecv.data(), drecv.bytes());
  check(st.ok() && dback == expect, r, "all-to-all-v, device " + st.message());

  st = comm.barrier();
  check(st.ok(), r, "barrier " + st.message());
}

// The second communicator: nobody may hang.
void failures_end_in_time(c::communicator& comm, int r) {
  const auto start = std::chrono::steady_clock::now();
  float x = 1;
  tutti::status st;
  if (r == kRanks - 1) {
    st = comm.abort(); // never joins: its peers must not wait forever
    check(st.ok(), r, "abort without joining " + st.message());
  } else if (r == 0) {
    std::thread aborter([&] {
      std::this_thread::sleep_for(1s);
      (void)comm.abort();
    });
    st = comm.all_reduce_sum(&x, 1);
    aborter.join();
    check(!st.ok(), r, "aborted while waiting: " + st.message());
  } else {
    st = comm.all_reduce_sum(&x, 1);
    check(!st.ok(), r, "a dead peer ends in an error: " + st.message());
  }
  const auto took = std::chrono::steady_clock::now() - start;
  check(took < 20s, r, "in bounded time");
  st = comm.all_reduce_sum(&x, 1);
  check(!st.ok(), r, "later calls refused: " + st.message());
}

int run_rank(int r, const std::string& dir) {
  gloo::rendezvous::FileStore store(dir);
  k::cuda_set_device(0);
  k::device_stream ks;
  if (auto comm = connect(store, r, "ranks/epoch-1", 60000ms, ks.handle()))
    collectives(*comm, ks, r);
  if (auto comm = connect(store, r, "ranks/epoch-2", 5000ms, nullptr))
    failures_end_in_time(*comm, r);
  return failures == 0 ? 0 : 1;
}

// Reaps every rank; one still running at the deadline is killed and
// counts as failed. Returns how many failed.
int wait_for_ranks(const std::vector<pid_t>& ranks,
                   std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<bool> done(ranks.size(), false);
  int failed = 0, left = int(ranks.size());
  while (left > 0) {
    const bool late = std::chrono::steady_clock::now() > deadline;
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (done[r])
        continue;
      if (late)
        kill(ranks[r], SIGKILL);
      int wstatus = 0;
      if (waitpid(ranks[r], &wstatus, late ? 0 : WNOHANG) != ranks[r])
        continue;
      done[r] = true;
      --left;
      const bool ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
      std::printf("rank %zu: %s\n", r,
                  ok ? "passed" : late ? "FAILED (killed at the deadline)"
                                       : "FAILED");
      failed += ok ? 0 : 1;
    }
    std::this_thread::sleep_for(50ms);
  }
  return failed;
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--rank")
    return run_rank(std::atoi(argv[2]), argv[3]);

  auto usable = c::nccl_built();
  if (usable)
    usable = k::cuda_device_available();
  if (!usable) {
    std::printf("SKIPPED test_nccl_ranks: %s\n", usable.message().c_str());
    return 77;
  }
  std::printf("device: %s; %d ranks on GPU 0, one process each\n",
              k::cuda_device_description().c_str(), kRanks);
  std::fflush(stdout);
  const auto dir = std::filesystem::temp_directory_path()
                   / ("tutti-nccl-ranks-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  std::vector<pid_t> children;
  for (int r = 0; r < kRanks; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      break; // the ranks started fail at their rendezvous; reaped below
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlives the test
      // A host identity per rank (see the top); sockets over loopback.
      const std::string host = "tutti-test-rank-" + std::to_string(r);
      setenv("NCCL_HOSTID", host.c_str(), 1);
      setenv("NCCL_SOCKET_IFNAME", "lo", 1);
      setenv("NCCL_IB_DISABLE", "1", 1);
      setenv("NCCL_MNNVL_ENABLE", "0", 1);
      const std::string rank = std::to_string(r);
      execl("/proc/self/exe", argv[0], "--rank", rank.c_str(), dir.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    children.push_back(pid);
  }
  const int failed =
    wait_for_ranks(children, 240s) + (kRanks - int(children.size()));
  std::filesystem::remove_all(dir);
  std::printf("%d passed, %d failed\n", kRanks - failed, failed);
  return failed == 0 ? 0 : 1;
}
