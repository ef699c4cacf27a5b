// NCCL communicator (nccl_communicator.hpp).
//
// Non-blocking NCCL (ncclConfig_t::blocking = 0): every call returns at
// once and this file waits for completion itself, polling the stream and
// ncclCommGetAsyncError. That is what makes timeouts and abort() work: a
// blocking NCCL call stuck on a dead peer cannot be interrupted, while a
// polling loop can give up, call ncclCommAbort and return an error.
//
// Only one thread calls ncclCommAbort: the thread inside a collective when
// there is one (abort() then only raises a flag it sees at the next poll),
// else abort() itself. So the communicator is never freed under a poll.

#include "tutti/comm/nccl_communicator.hpp"

#ifdef TUTTI_WITH_NCCL

#include <gloo/rendezvous/store.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "gloo_check.hpp"
#include "nccl_check.hpp"

namespace tutti::comm {
namespace {

using steady = std::chrono::steady_clock;

class nccl_comm final : public nccl_communicator {
public:
  nccl_comm(ncclComm_t comm, int rank, int size, int device,
            cudaStream_t stream, bool own_stream, nccl_options options)
    : comm_(comm), rank_(rank), size_(size), device_(device), stream_(stream),
      own_stream_(own_stream), options_(std::move(options)) {}

  ~nccl_comm() override {
    cudaSetDevice(device_);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_) {
      // Finalize flushes outstanding work; bounded, then abort regardless.
      ncclResult_t state = ncclCommFinalize(comm_);
      const auto deadline = steady::now() + options_.timeout;
      while (state == ncclInProgress && steady::now() < deadline) {
        std::this_thread::sleep_for(options_.poll);
        ncclCommGetAsyncError(comm_, &state);
      }
      if (state == ncclSuccess)
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
    if (staging_ != nullptr)
      cudaFree(staging_);
    if (own_stream_)
      cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  status all_reduce_sum(float* data, size_t count) override {
    return reduce(data, count, ncclFloat32, sizeof(float));
  }
  status all_reduce_sum(double* data, size_t count) override {
    return reduce(data, count, ncclFloat64, sizeof(double));
  }
  status all_reduce_sum(int64_t* data, size_t count) override {
    return reduce(data, count, ncclInt64, sizeof(int64_t));
  }

  status all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                      void* recv, const std::vector<int64_t>& recv_counts,
                      size_t element_bytes) override {
    if (send_counts.size() != size_t(size_)
        || recv_counts.size() != size_t(size_))
      return status::error(
        "nccl all_to_all_v: counts must have one entry per member");
    if (send_counts[rank_] != recv_counts[rank_])
      return status::error(
        "nccl all_to_all_v: send and receive counts to self differ");
    size_t send_bytes = 0, recv_bytes = 0;
    for (int p = 0; p < size_; ++p) {
      send_bytes += size_t(send_counts[p]) * element_bytes;
      recv_bytes += size_t(recv_counts[p]) * element_bytes;
    }
    return run("all_to_all_v", [&]() -> status {
      bool send_dev = true, recv_dev = true;
      TUTTI_RETURN_IF_ERROR(on_device(send, send_dev));
      TUTTI_RETURN_IF_ERROR(on_device(recv, recv_dev));
      // Host buffers go through one staging buffer: send part, recv part.
      const size_t recv_at = (send_bytes + 255) & ~size_t(255);
      void* stage = nullptr;
      if (!send_dev || !recv_dev)
        TUTTI_RETURN_IF_ERROR(staging(recv_at + recv_bytes, stage));
      const char* sbuf = static_cast<const char*>(send);
      char* rbuf = static_cast<char*>(recv);
      if (!send_dev) {
        sbuf = static_cast<const char*>(stage);
        if (send_bytes > 0)
          TUTTI_COMM_CUDA_CHECK(cudaMemcpyAsync(
            stage, send, send_bytes, cudaMemcpyHostToDevice, stream_));
      }
      if (!recv_dev)
        rbuf = static_cast<char*>(stage) + recv_at;
      std::vector<size_t> soff(size_ + 1, 0), roff(size_ + 1, 0);
      for (int p = 0; p < size_; ++p) {
        soff[p + 1] = soff[p] + size_t(send_counts[p]) * element_bytes;
        roff[p + 1] = roff[p] + size_t(recv_counts[p]) * element_bytes;
      }
      // Our own block is a local copy, not a message to ourselves.
      const size_t self = soff[rank_ + 1] - soff[rank_];
      if (self > 0)
        TUTTI_COMM_CUDA_CHECK(
          cudaMemcpyAsync(rbuf + roff[rank_], sbuf + soff[rank_], self,
                          cudaMemcpyDeviceToDevice, stream_));
      // Grouped point-to-point: NCCL schedules all pairs together. The
      // group is always closed, even when one call in it failed.
      ncclResult_t first = ncclSuccess;
      TUTTI_NCCL_CHECK(ncclGroupStart());
      for (int p = 0; p < size_; ++p) {
        if (p == rank_)
          continue;
        const size_t sn = soff[p + 1] - soff[p], rn = roff[p + 1] - roff[p];
        if (sn > 0 && first == ncclSuccess)
          first = ncclSend(sbuf + soff[p], sn, ncclUint8, p, comm_, stream_);
        if (rn > 0 && first == ncclSuccess)
          first = ncclRecv(rbuf + roff[p], rn, ncclUint8, p, comm_, stream_);
        if (first == ncclInProgress)
          first = ncclSuccess;
      }
      TUTTI_NCCL_CHECK(ncclGroupEnd());
      TUTTI_NCCL_CHECK(first);
      TUTTI_RETURN_IF_ERROR(wait("all_to_all_v"));
      if (!recv_dev && recv_bytes > 0) {
        TUTTI_COMM_CUDA_CHECK(cudaMemcpyAsync(recv, rbuf, recv_bytes,
                                              cudaMemcpyDeviceToHost, stream_));
        TUTTI_COMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      }
      return {};
    });
  }

  status all_to_all(const int64_t* send, int64_t* recv,
                    size_t per_member) override {
    std::vector<int64_t> counts(size_, static_cast<int64_t>(per_member));
    return all_to_all_v(send, counts, recv, counts, sizeof(int64_t));
  }

  // NCCL has no barrier: an all-reduce of one value is one.
  status barrier() override {
    int64_t one = 1;
    return reduce(&one, 1, ncclInt64, sizeof(int64_t));
  }

  bool takes_device_memory() const override { return true; }

  std::string describe() const override {
    return "nccl/" + options_.group + " rank " + std::to_string(rank_) + "/"
           + std::to_string(size_) + " cuda:" + std::to_string(device_);
  }

  status abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_)
      return {};
    if (in_flight_) {
      abort_requested_ =
        true; // the collective's thread aborts at its next poll
      return {};
    }
    aborted_ = true;
    TUTTI_NCCL_CHECK(ncclCommAbort(comm_));
    return {};
  }

private:
  // Runs one collective: refuses after abort, marks it in flight (see
  // abort()), makes our device current on the calling thread.
  template <class F>
  status run(const char* what, F issue) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (aborted_)
        return status::error(describe() + ": aborted; " + what + " refused");
      in_flight_ = true;
    }
    status st;
    if (cudaSetDevice(device_) != cudaSuccess)
      st = status::error(describe() + ": cannot make the device current");
    else
      st = issue();
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_ = false;
    if (abort_requested_ && !aborted_) {
      aborted_ = true;
      ncclCommAbort(comm_);
    }
    return st;
  }

  status reduce(void* data, size_t count, ncclDataType_t type, size_t elem) {
    if (count == 0)
      return {};
    return run("all_reduce", [&]() -> status {
      bool dev = true;
      TUTTI_RETURN_IF_ERROR(on_device(data, dev));
      void* buf = data;
      const size_t bytes = count * elem;
      if (!dev) {
        TUTTI_RETURN_IF_ERROR(staging(bytes, buf));
        TUTTI_COMM_CUDA_CHECK(
          cudaMemcpyAsync(buf, data, bytes, cudaMemcpyHostToDevice, stream_));
      }
      TUTTI_NCCL_CHECK(
        ncclAllReduce(buf, buf, count, type, ncclSum, comm_, stream_));
      TUTTI_RETURN_IF_ERROR(wait("all_reduce"));
      if (!dev) {
        TUTTI_COMM_CUDA_CHECK(
          cudaMemcpyAsync(data, buf, bytes, cudaMemcpyDeviceToHost, stream_));
        TUTTI_COMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      }
      return {};
    });
  }

  // Polls until the issued work is done, NCCL reports an error, abort() was
  // asked for, or the timeout passes; the last three abort the communicator.
  status wait(const char* what) {
    const auto deadline = steady::now() + options_.timeout;
    for (;;) {
      if (abort_requested_)
        return abort_now(std::string("abort requested during ") + what);
      ncclResult_t async = ncclSuccess;
      TUTTI_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess && async != ncclInProgress)
        return abort_now(std::string(what) + ": NCCL async error "
                         + ncclGetErrorString(async) + " ("
                         + ncclGetLastError(comm_) + ")");
      if (async == ncclSuccess) { // everything is enqueued: is it done?
        const cudaError_t q = cudaStreamQuery(stream_);
        if (q == cudaSuccess)
          return {};
        TUTTI_COMM_CUDA_CHECK(q == cudaErrorNotReady ? cudaSuccess : q);
      }
      if (steady::now() > deadline)
        return abort_now(std::string(what) + ": timed out after "
                         + std::to_string(options_.timeout.count()) + " ms");
      std::this_thread::sleep_for(options_.poll);
    }
  }

  status abort_now(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!aborted_) {
        aborted_ = true;
        ncclCommAbort(comm_);
      }
    }
    return status::error(describe() + ": " + why + "; communicator aborted");
  }

  static status on_device(const void* p, bool& dev) {
    dev = true;
    if (p == nullptr)
      return {};
    cudaPointerAttributes attr{};
    TUTTI_COMM_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
    dev = attr.type == cudaMemoryTypeDevice
          || attr.type == cudaMemoryTypeManaged;
    return {};
  }

  status staging(size_t bytes, void*& out) {
    if (bytes > staging_bytes_) {
      if (staging_ != nullptr) {
        TUTTI_COMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
        TUTTI_COMM_CUDA_CHECK(cudaFree(staging_));
        staging_ = nullptr;
        staging_bytes_ = 0;
      }
      TUTTI_COMM_CUDA_CHECK(cudaMalloc(&staging_, bytes));
      staging_bytes_ = bytes;
    }
    out = staging_;
    return {};
  }

  ncclComm_t comm_;
  int rank_, size_, device_;
  cudaStream_t stream_;
  bool own_stream_;
  nccl_options options_;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  std::mutex mutex_;
  bool in_flight_ = false;
  bool aborted_ = false;
  std::atomic<bool> abort_requested_{false};
};

} // namespace

status nccl_built() { return {}; }

status make_nccl_communicator(gloo::rendezvous::Store& store, int rank,
                              int size, const nccl_options& options,
                              std::unique_ptr<nccl_communicator>& out) {
  int count = 0;
  const cudaError_t probe = cudaGetDeviceCount(&count);
  if (probe != cudaSuccess || count == 0)
    return status::error(
      std::string("nccl communicator: no GPU answers (")
      + (probe != cudaSuccess ? cudaGetErrorString(probe) : "no CUDA device")
      + "); use communication_backend: gloo on CPU");
  int device = options.device;
  if (device < 0)
    TUTTI_COMM_CUDA_CHECK(cudaGetDevice(&device));
  TUTTI_COMM_CUDA_CHECK(cudaSetDevice(device));

  // The unique id travels through the rendezvous store (the coordinator).
  ncclUniqueId id;
  const std::string key = options.group + "/nccl_unique_id";
  if (rank == 0) {
    TUTTI_NCCL_CHECK(ncclGetUniqueId(&id));
    const std::vector<char> bytes(id.internal,
                                  id.internal + sizeof(id.internal));
    TUTTI_GLOO_CHECK(store.set(key, bytes));
  } else {
    std::vector<char> bytes;
    TUTTI_GLOO_CHECK(store.wait({key}, options.timeout));
    TUTTI_GLOO_CHECK(bytes = store.get(key));
    if (bytes.size() != sizeof(id.internal))
      return status::error("nccl communicator: unique id under '" + key
                           + "' has the wrong size");
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; // see the top of this file
  ncclComm_t comm = nullptr;
  TUTTI_NCCL_CHECK(ncclCommInitRankConfig(&comm, size, id, rank, &config));
  ncclResult_t state = ncclInProgress;
  const auto deadline = steady::now() + options.timeout;
  for (;;) {
    TUTTI_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
    if (state != ncclInProgress || steady::now() > deadline)
      break;
    std::this_thread::sleep_for(options.poll);
  }
  if (state != ncclSuccess) {
    ncclCommAbort(comm);
    return status::error(
      "nccl communicator: init of rank " + std::to_string(rank) + "/"
      + std::to_string(size) + " failed: "
      + (state == ncclInProgress ? std::string("timed out")
                                 : ncclGetErrorString(state)));
  }

  auto stream = static_cast<cudaStream_t>(options.stream);
  const bool own = stream == nullptr;
  if (own) {
    const cudaError_t e = cudaStreamCreateWithFlags(&stream,
                                                    cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      ncclCommAbort(comm);
      TUTTI_COMM_CUDA_CHECK(e);
    }
  }
  out = std::make_unique<nccl_comm>(comm, rank, size, device, stream, own,
                                    options);
  return {};
}

} // namespace tutti::comm

#else // !TUTTI_WITH_NCCL

namespace tutti::comm {

status nccl_built() {
  return status::error(
    "tutti was built without NCCL (no CUDA toolkit or nccl.h when it was"
    " configured)");
}

status make_nccl_communicator(gloo::rendezvous::Store&, int, int,
                              const nccl_options&,
                              std::unique_ptr<nccl_communicator>&) {
  return nccl_built().with_context("communication_backend nccl: ");
}

} // namespace tutti::comm

#endif
