// NCCL communicator (nccl_communicator.hpp), over nccl_calls.
//
// Non-blocking NCCL (ncclConfig_t::blocking = 0): every call returns at
// once and this file waits for completion itself, polling the stream and
// ncclCommGetAsyncError. That is what makes timeouts and abort() work: a
// blocking NCCL call stuck on a dead peer cannot be interrupted, while a
// polling loop can give up, call ncclCommAbort and return an error.
//
// One lock, op_mutex_, is held across a collective's issue and its wait, so
// collectives from several threads run one after another (NCCL calls on
// one communicator must not interleave), and every ncclCommAbort is made
// under it: the communicator is never freed under a thread that polls it.
// abort() from another thread raises abort_requested_, which the polling
// thread sees within one poll and acts on, then takes the lock itself.
// Any failure of a collective aborts the communicator (its peers then fail
// instead of waiting for their timeout) and every later call is refused.

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
namespace detail {
namespace {

using steady = std::chrono::steady_clock;

class nccl_comm final : public nccl_communicator {
public:
  nccl_comm(std::shared_ptr<nccl_calls> calls, ncclComm_t comm, int rank,
            int size, int device, cudaStream_t stream, bool own_stream,
            nccl_options options)
    : nccl_(std::move(calls)), comm_(comm), rank_(rank), size_(size),
      device_(device), stream_(stream), own_stream_(own_stream),
      options_(std::move(options)) {}

  ~nccl_comm() override {
    std::lock_guard<std::mutex> lock(op_mutex_);
    nccl_->set_device(device_);
    if (!aborted_) {
      // Finalize flushes outstanding work; bounded, then abort regardless.
      ncclResult_t state = nccl_->comm_finalize(comm_);
      const auto deadline = steady::now() + options_.timeout;
      while (state == ncclInProgress && steady::now() < deadline) {
        std::this_thread::sleep_for(options_.poll);
        nccl_->comm_get_async_error(comm_, &state);
      }
      if (state == ncclSuccess)
        nccl_->comm_destroy(comm_);
      else
        nccl_->comm_abort(comm_);
    }
    if (staging_ != nullptr)
      nccl_->device_free(staging_);
    if (own_stream_)
      nccl_->stream_destroy(stream_);
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
    return run("all_to_all_v", [&]() -> status {
      return exchange(send, send_counts, recv, recv_counts, element_bytes);
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
    // A collective in flight sees the flag at its next poll and aborts; the
    // lock is then free within one poll, and nothing is left to do here.
    abort_requested_ = true;
    std::lock_guard<std::mutex> lock(op_mutex_);
    return abort_locked();
  }

private:
  // Runs one collective under op_mutex_: refused after an abort; any
  // failure aborts the communicator.
  template <class F>
  status run(const char* what, F issue) {
    std::lock_guard<std::mutex> lock(op_mutex_);
    if (aborted_ || abort_requested_) {
      (void)abort_locked();
      return status::error(describe() + ": aborted; " + what + " refused");
    }
    status st;
    if (nccl_->set_device(device_) != cudaSuccess)
      st = status::error("cannot make the device current");
    else
      st = issue();
    if (st.ok())
      return st;
    const status aborted = abort_locked();
    return status::error(describe() + ": " + what + ": " + st.message()
                         + (aborted.ok() ? "; communicator aborted"
                                         : "; " + aborted.message()));
  }

  // Called with op_mutex_ held: the only place ncclCommAbort is called
  // after construction.
  status abort_locked() {
    if (aborted_)
      return {};
    aborted_ = true;
    TUTTI_NCCL_CHECK(nccl_->comm_abort(comm_));
    return {};
  }

  status reduce(void* data, size_t count, ncclDataType_t type, size_t elem) {
    return run("all_reduce", [&]() -> status {
      if (count == 0)
        return {};
      bool dev = true;
      TUTTI_RETURN_IF_ERROR(on_device(data, dev));
      void* buf = data;
      const size_t bytes = count * elem;
      if (!dev) {
        TUTTI_RETURN_IF_ERROR(staging(bytes, buf));
        TUTTI_COMM_CUDA_CHECK(nccl_->memcpy_async(
          buf, data, bytes, cudaMemcpyHostToDevice, stream_));
      }
      TUTTI_NCCL_CHECK(
        nccl_->all_reduce(buf, buf, count, type, ncclSum, comm_, stream_));
      TUTTI_RETURN_IF_ERROR(wait());
      if (!dev) {
        TUTTI_COMM_CUDA_CHECK(nccl_->memcpy_async(
          data, buf, bytes, cudaMemcpyDeviceToHost, stream_));
        TUTTI_COMM_CUDA_CHECK(nccl_->stream_synchronize(stream_));
      }
      return {};
    });
  }

  // The body of all_to_all_v, under run().
  status exchange(const void* send, const std::vector<int64_t>& send_counts,
                  void* recv, const std::vector<int64_t>& recv_counts,
                  size_t element_bytes) {
    if (send_counts.size() != size_t(size_)
        || recv_counts.size() != size_t(size_))
      return status::error("counts must have one entry per member");
    if (send_counts[rank_] != recv_counts[rank_])
      return status::error("send and receive counts to self differ");
    std::vector<size_t> soff(size_ + 1, 0), roff(size_ + 1, 0);
    for (int p = 0; p < size_; ++p) {
      soff[p + 1] = soff[p] + size_t(send_counts[p]) * element_bytes;
      roff[p + 1] = roff[p] + size_t(recv_counts[p]) * element_bytes;
    }
    const size_t send_bytes = soff[size_], recv_bytes = roff[size_];
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
        TUTTI_COMM_CUDA_CHECK(nccl_->memcpy_async(
          stage, send, send_bytes, cudaMemcpyHostToDevice, stream_));
    }
    if (!recv_dev)
      rbuf = static_cast<char*>(stage) + recv_at;
    // Our own block is a local copy, not a message to ourselves.
    const size_t self = soff[rank_ + 1] - soff[rank_];
    if (self > 0)
      TUTTI_COMM_CUDA_CHECK(
        nccl_->memcpy_async(rbuf + roff[rank_], sbuf + soff[rank_], self,
                            cudaMemcpyDeviceToDevice, stream_));
    // Grouped point-to-point: NCCL schedules all pairs together. The
    // group is always closed, even when one call in it failed.
    ncclResult_t first = ncclSuccess;
    TUTTI_NCCL_CHECK(nccl_->group_start());
    for (int p = 0; p < size_ && first == ncclSuccess; ++p) {
      if (p == rank_)
        continue;
      const size_t sn = soff[p + 1] - soff[p], rn = roff[p + 1] - roff[p];
      if (sn > 0)
        first = nccl_->send(sbuf + soff[p], sn, ncclUint8, p, comm_, stream_);
      if (first == ncclInProgress)
        first = ncclSuccess;
      if (rn > 0 && first == ncclSuccess)
        first = nccl_->recv(rbuf + roff[p], rn, ncclUint8, p, comm_, stream_);
      if (first == ncclInProgress)
        first = ncclSuccess;
    }
    TUTTI_NCCL_CHECK(nccl_->group_end());
    TUTTI_NCCL_CHECK(first);
    TUTTI_RETURN_IF_ERROR(wait());
    if (!recv_dev && recv_bytes > 0) {
      TUTTI_COMM_CUDA_CHECK(nccl_->memcpy_async(
        recv, rbuf, recv_bytes, cudaMemcpyDeviceToHost, stream_));
      TUTTI_COMM_CUDA_CHECK(nccl_->stream_synchronize(stream_));
    }
    return {};
  }

  // Polls until the issued work is done, NCCL reports an error, abort() was
  // asked for, or the timeout passes; run() aborts on the last three.
  status wait() {
    const auto deadline = steady::now() + options_.timeout;
    for (;;) {
      if (abort_requested_)
        return status::error("abort requested while waiting");
      ncclResult_t async = ncclSuccess;
      TUTTI_NCCL_CHECK(nccl_->comm_get_async_error(comm_, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        const char* last = nccl_->last_error(comm_);
        return status::error(std::string("NCCL async error ")
                             + nccl_result_name(async)
                             + (last && *last ? std::string(" (") + last + ")"
                                              : std::string()));
      }
      if (async == ncclSuccess) { // everything is enqueued: is it done?
        const cudaError_t q = nccl_->stream_query(stream_);
        if (q == cudaSuccess)
          return {};
        TUTTI_COMM_CUDA_CHECK(q == cudaErrorNotReady ? cudaSuccess : q);
      }
      if (steady::now() > deadline)
        return status::error("timed out after "
                             + std::to_string(options_.timeout.count())
                             + " ms");
      std::this_thread::sleep_for(options_.poll);
    }
  }

  status on_device(const void* p, bool& dev) {
    dev = true;
    if (p == nullptr)
      return {};
    TUTTI_COMM_CUDA_CHECK(nccl_->is_device_pointer(p, &dev));
    return {};
  }

  status staging(size_t bytes, void*& out) {
    if (bytes > staging_bytes_) {
      if (staging_ != nullptr) {
        TUTTI_COMM_CUDA_CHECK(nccl_->stream_synchronize(stream_));
        TUTTI_COMM_CUDA_CHECK(nccl_->device_free(staging_));
        staging_ = nullptr;
        staging_bytes_ = 0;
      }
      TUTTI_COMM_CUDA_CHECK(nccl_->device_malloc(&staging_, bytes));
      staging_bytes_ = bytes;
    }
    out = staging_;
    return {};
  }

  const std::shared_ptr<nccl_calls> nccl_;
  const ncclComm_t comm_;
  const int rank_, size_, device_;
  const cudaStream_t stream_;
  const bool own_stream_;
  const nccl_options options_;
  std::mutex op_mutex_; // guards everything below but abort_requested_
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  bool aborted_ = false;
  std::atomic<bool> abort_requested_{false};
};

// Waits for a non-blocking init; aborts the communicator when it fails.
status finish_init(nccl_calls& nccl, ncclComm_t comm, int rank, int size,
                   const nccl_options& options) {
  ncclResult_t state = ncclInProgress;
  const auto deadline = steady::now() + options.timeout;
  for (;;) {
    if (nccl.comm_get_async_error(comm, &state) != ncclSuccess)
      state = ncclInternalError;
    if (state != ncclInProgress || steady::now() > deadline)
      break;
    std::this_thread::sleep_for(options.poll);
  }
  if (state == ncclSuccess)
    return {};
  nccl.comm_abort(comm);
  return status::error(
    "nccl communicator: init of rank " + std::to_string(rank) + "/"
    + std::to_string(size) + " failed: "
    + (state == ncclInProgress ? std::string("timed out")
                               : std::string(nccl_result_name(state))));
}

} // namespace

status make_nccl_communicator_over(std::shared_ptr<nccl_calls> calls,
                                   gloo::rendezvous::Store& store, int rank,
                                   int size, const nccl_options& options,
                                   std::unique_ptr<nccl_communicator>& out) {
  nccl_calls& nccl = *calls;
  TUTTI_COMM_CUDA_CHECK(nccl.set_device(options.device));
  // The unique id travels through the rendezvous store (the coordinator).
  ncclUniqueId id;
  const std::string key = options.group + "/nccl_unique_id";
  if (rank == 0) {
    TUTTI_NCCL_CHECK(nccl.get_unique_id(&id));
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
  const ncclResult_t init =
    nccl.comm_init_rank_config(&comm, size, id, rank, &config);
  if (init != ncclSuccess && init != ncclInProgress) {
    if (comm != nullptr)
      nccl.comm_abort(comm);
    TUTTI_NCCL_CHECK(init);
  }
  TUTTI_RETURN_IF_ERROR(finish_init(nccl, comm, rank, size, options));

  auto stream = static_cast<cudaStream_t>(options.stream);
  const bool own = stream == nullptr;
  if (own) {
    const cudaError_t e = nccl.stream_create(&stream);
    if (e != cudaSuccess) {
      nccl.comm_abort(comm);
      TUTTI_COMM_CUDA_CHECK(e);
    }
  }
  out = std::make_unique<nccl_comm>(std::move(calls), comm, rank, size,
                                    options.device, stream, own, options);
  return {};
}

} // namespace detail

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
  std::shared_ptr<detail::nccl_calls> calls;
  TUTTI_RETURN_IF_ERROR(detail::load_nccl_calls(calls).with_context(
    "nccl communicator: "));
  nccl_options resolved = options;
  if (resolved.device < 0)
    TUTTI_COMM_CUDA_CHECK(cudaGetDevice(&resolved.device));
  return detail::make_nccl_communicator_over(std::move(calls), store, rank,
                                             size, resolved, out);
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
