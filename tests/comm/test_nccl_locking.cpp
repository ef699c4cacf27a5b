// The NCCL communicator's locking and abort paths, on the CPU: a fake
// nccl_calls (comm/src/nccl_calls.hpp) stands in for NCCL and the CUDA
// stream, holds a collective "on the device" until the test lets it
// finish, and fails on demand. Checked: collectives from two threads never
// overlap; a failure (at issue, asynchronous, a timeout, bad arguments)
// aborts the communicator once and refuses every later call; abort() from
// another thread during a wait returns the waiter an error and never
// touches the communicator after freeing it (the fake frees it for real,
// so AddressSanitizer would also see a use after free).

#include <catch2/catch.hpp>

#include <gloo/rendezvous/hash_store.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nccl_calls.hpp"

using namespace tutti;
using namespace std::chrono_literals;

namespace {

// A communicator handle the fake allocates and frees.
struct fake_handle {
  int magic = 0x6e63636c;
};

class fake_nccl final : public comm::detail::nccl_calls {
public:
  // What the test sets.
  std::atomic<bool> hold{false}; // issued work stays "running" while true
  std::atomic<ncclResult_t> issue_result{ncclSuccess};
  std::atomic<ncclResult_t> async_result{ncclSuccess};
  std::atomic<bool> host_buffers{false}; // callers pass host memory
  std::atomic<bool> malloc_fails{false};

  // What the test reads.
  std::atomic<int> issued{0}, aborts{0}, finalized{0}, destroyed{0};
  std::atomic<int> running{0}, most_running{0};
  std::atomic<int> bad_calls{0}; // a call on a freed or unknown handle

  // Blocks until `n` collectives have been issued.
  void wait_issued(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, 10s, [&] { return issued >= n; });
  }

  ncclResult_t get_unique_id(ncclUniqueId* id) override {
    std::memset(id, 0, sizeof(*id));
    return ncclSuccess;
  }
  ncclResult_t comm_init_rank_config(ncclComm_t* comm, int, ncclUniqueId, int,
                                     ncclConfig_t*) override {
    auto* h = new fake_handle;
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(h);
    *comm = reinterpret_cast<ncclComm_t>(h);
    return ncclInProgress; // non-blocking init, finished at the first poll
  }
  ncclResult_t comm_get_async_error(ncclComm_t comm,
                                    ncclResult_t* state) override {
    check(comm);
    *state = async_result;
    return ncclSuccess;
  }
  ncclResult_t comm_finalize(ncclComm_t comm) override {
    check(comm);
    ++finalized;
    return ncclSuccess;
  }
  ncclResult_t comm_destroy(ncclComm_t comm) override {
    ++destroyed;
    return release(comm);
  }
  ncclResult_t comm_abort(ncclComm_t comm) override {
    ++aborts;
    running = 0; // the device work dies with the communicator
    return release(comm);
  }
  ncclResult_t all_reduce(const void*, void*, size_t, ncclDataType_t,
                          ncclRedOp_t, ncclComm_t comm, cudaStream_t) override {
    check(comm);
    return issue();
  }
  ncclResult_t group_start() override { return ncclSuccess; }
  ncclResult_t group_end() override { return issue(); }
  ncclResult_t send(const void*, size_t, ncclDataType_t, int, ncclComm_t comm,
                    cudaStream_t) override {
    check(comm);
    return ncclSuccess;
  }
  ncclResult_t recv(void*, size_t, ncclDataType_t, int, ncclComm_t comm,
                    cudaStream_t) override {
    check(comm);
    return ncclSuccess;
  }
  const char* last_error(ncclComm_t) override { return "injected"; }

  cudaError_t set_device(int) override { return cudaSuccess; }
  cudaError_t is_device_pointer(const void*, bool* device) override {
    *device = !host_buffers;
    return cudaSuccess;
  }
  cudaError_t memcpy_async(void* dst, const void* src, size_t bytes,
                           cudaMemcpyKind, cudaStream_t) override {
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  }
  cudaError_t stream_query(cudaStream_t) override {
    if (hold)
      return cudaErrorNotReady;
    if (running > 0)
      --running;
    return cudaSuccess;
  }
  cudaError_t stream_synchronize(cudaStream_t) override { return cudaSuccess; }
  cudaError_t stream_create(cudaStream_t* s) override {
    *s = reinterpret_cast<cudaStream_t>(this);
    return cudaSuccess;
  }
  cudaError_t stream_destroy(cudaStream_t) override { return cudaSuccess; }
  cudaError_t device_malloc(void** p, size_t bytes) override {
    if (malloc_fails)
      return cudaErrorMemoryAllocation;
    *p = std::malloc(bytes);
    return cudaSuccess;
  }
  cudaError_t device_free(void* p) override {
    std::free(p);
    return cudaSuccess;
  }

private:
  ncclResult_t issue() {
    const ncclResult_t r = issue_result;
    if (r != ncclSuccess)
      return r;
    const int now = ++running;
    int seen = most_running;
    while (now > seen && !most_running.compare_exchange_weak(seen, now)) {
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++issued;
    }
    cv_.notify_all();
    return ncclInProgress;
  }
  void check(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (live_.count(reinterpret_cast<fake_handle*>(comm)) == 0)
      ++bad_calls;
  }
  ncclResult_t release(ncclComm_t comm) {
    auto* h = reinterpret_cast<fake_handle*>(comm);
    std::lock_guard<std::mutex> lock(mutex_);
    if (live_.erase(h) == 0) {
      ++bad_calls; // freed twice
      return ncclInvalidArgument;
    }
    delete h;
    return ncclSuccess;
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::set<fake_handle*> live_;
};

struct fixture {
  std::shared_ptr<fake_nccl> nccl = std::make_shared<fake_nccl>();
  gloo::rendezvous::HashStore store;
  std::unique_ptr<comm::nccl_communicator> comm;

  explicit fixture(std::chrono::milliseconds timeout = 10000ms) {
    comm::nccl_options opt;
    opt.group = "locking";
    opt.device = 0;
    opt.timeout = timeout;
    opt.poll = 100us;
    const status st = comm::detail::make_nccl_communicator_over(
      nccl, store, 0, 2, opt, comm);
    REQUIRE(st.message() == "");
  }
};

bool refused(comm::communicator& c) {
  float x = 1;
  const status st = c.all_reduce_sum(&x, 1);
  return !st.ok() && st.message().find("refused") != std::string::npos;
}

} // namespace

TEST_CASE("collectives from two threads run one after the other",
          "[comm][nccl]") {
  fixture f;
  f.nccl->hold = true;
  float a = 1, b = 2;
  status sa, sb;
  std::thread ta([&] { sa = f.comm->all_reduce_sum(&a, 1); });
  f.nccl->wait_issued(1);
  std::thread tb([&] { sb = f.comm->all_reduce_sum(&b, 1); });
  std::this_thread::sleep_for(50ms); // tb would issue now if not serialized
  CHECK(f.nccl->issued == 1);
  f.nccl->hold = false;
  ta.join();
  tb.join();
  CHECK(sa.ok());
  CHECK(sb.ok());
  CHECK(f.nccl->issued == 2);
  CHECK(f.nccl->most_running == 1);
  CHECK(f.nccl->aborts == 0);
  CHECK(f.nccl->bad_calls == 0);
}

TEST_CASE("a failed collective aborts the communicator and refuses the rest",
          "[comm][nccl]") {
  SECTION("failure at issue") {
    fixture f;
    f.nccl->issue_result = ncclSystemError;
    float x = 1;
    const status st = f.comm->all_reduce_sum(&x, 1);
    CHECK(!st.ok());
    CHECK(st.message().find("ncclSystemError") != std::string::npos);
    CHECK(st.message().find("communicator aborted") != std::string::npos);
    f.nccl->issue_result = ncclSuccess;
    CHECK(refused(*f.comm));
    CHECK(f.nccl->aborts == 1);
  }
  SECTION("asynchronous error while waiting") {
    fixture f;
    f.nccl->hold = true;
    float x = 1;
    status st;
    std::thread t([&] { st = f.comm->all_reduce_sum(&x, 1); });
    f.nccl->wait_issued(1);
    f.nccl->async_result = ncclRemoteError;
    t.join();
    CHECK(st.message().find("ncclRemoteError") != std::string::npos);
    CHECK(st.message().find("injected") != std::string::npos);
    CHECK(refused(*f.comm));
    CHECK(f.nccl->aborts == 1);
  }
  SECTION("timeout") {
    fixture f(100ms);
    f.nccl->hold = true;
    std::vector<int64_t> counts{1, 1};
    int64_t send[2] = {1, 2}, recv[2] = {0, 0};
    const status st = f.comm->all_to_all_v(send, counts, recv, counts, 8);
    CHECK(st.message().find("timed out after 100 ms") != std::string::npos);
    CHECK(refused(*f.comm));
    CHECK(f.nccl->aborts == 1);
  }
  SECTION("bad arguments") {
    fixture f;
    int64_t send[2] = {1, 2}, recv[2] = {0, 0};
    const status st =
      f.comm->all_to_all_v(send, {1, 1}, recv, {2, 1}, sizeof(int64_t));
    CHECK(st.message().find("counts to self differ") != std::string::npos);
    CHECK(refused(*f.comm));
    CHECK(f.nccl->aborts == 1);
  }
  // No call reached a freed communicator, and the destructor neither
  // finalizes nor frees an aborted one again (release() would count it).
}

TEST_CASE("host buffers are staged; a failed staging aborts",
          "[comm][nccl]") {
  fixture f;
  f.nccl->host_buffers = true;
  std::vector<int64_t> counts{2, 1};
  const std::vector<int64_t> send{1, 2, 3};
  std::vector<int64_t> recv(3, 0);
  // Our own block is a local copy; the fake moves nothing between ranks.
  CHECK(f.comm->all_to_all_v(send.data(), counts, recv.data(), {2, 1},
                             sizeof(int64_t))
          .ok());
  CHECK(recv[0] == 1);
  CHECK(recv[1] == 2);
  float x = 3;
  CHECK(f.comm->all_reduce_sum(&x, 1).ok());
  CHECK(x == 3);
  // More than the staging buffer holds: a new one, which cannot be had.
  f.nccl->malloc_fails = true;
  std::vector<double> big(4096, 1.0);
  const status st = f.comm->all_reduce_sum(big.data(), big.size());
  CHECK(st.message().find("cudaErrorMemoryAllocation") != std::string::npos);
  CHECK(st.message().find("communicator aborted") != std::string::npos);
  CHECK(refused(*f.comm));
  CHECK(f.nccl->aborts == 1);
  CHECK(f.nccl->bad_calls == 0);
}

TEST_CASE("abort from another thread during a wait", "[comm][nccl]") {
  auto nccl = std::make_shared<fake_nccl>();
  {
    fixture f;
    nccl = f.nccl;
    f.nccl->hold = true;
    float x = 1, y = 2;
    status waiter, queued;
    std::thread t1([&] { waiter = f.comm->all_reduce_sum(&x, 1); });
    f.nccl->wait_issued(1);
    std::thread t2([&] { queued = f.comm->all_reduce_sum(&y, 1); });
    std::this_thread::sleep_for(20ms);
    const auto start = std::chrono::steady_clock::now();
    CHECK(f.comm->abort().ok());
    const auto took = std::chrono::steady_clock::now() - start;
    t1.join();
    t2.join();
    CHECK(took < 2s); // the waiter saw the request within a poll
    CHECK(waiter.message().find("abort requested while waiting")
          != std::string::npos);
    CHECK(queued.message().find("refused") != std::string::npos);
    CHECK(f.nccl->issued == 1);
    CHECK(f.nccl->aborts == 1);
    CHECK(f.comm->abort().ok()); // again: nothing more to do
    CHECK(refused(*f.comm));
  }
  CHECK(nccl->aborts == 1);
  CHECK(nccl->finalized == 0);
  CHECK(nccl->destroyed == 0);
  CHECK(nccl->bad_calls == 0);
}

TEST_CASE("abort with nothing in flight, and a clean close",
          "[comm][nccl]") {
  auto nccl = std::make_shared<fake_nccl>();
  {
    fixture f;
    nccl = f.nccl;
    CHECK(f.comm->barrier().ok());
    CHECK(f.comm->abort().ok());
    CHECK(refused(*f.comm));
  }
  CHECK(nccl->aborts == 1);
  CHECK(nccl->bad_calls == 0);
  {
    fixture f;
    nccl = f.nccl;
    CHECK(f.comm->barrier().ok());
  }
  CHECK(nccl->aborts == 0);
  CHECK(nccl->finalized == 1);
  CHECK(nccl->destroyed == 1);
  CHECK(nccl->bad_calls == 0);
}
