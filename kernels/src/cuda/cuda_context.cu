// Per-thread cuBLAS handles and per-stream scratch memory of the CUDA
// backend.

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "cublas_loader.hpp"
#include "cuda_common.cuh"

namespace tutti::kernels::cuda {

namespace {

int current_device() {
  int d = 0;
  TUTTI_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

} // namespace

cublasHandle_t blas_handle(const stream& s) {
  // Per thread: a cuBLAS handle must not be used by two threads at once,
  // and a rank drives its device from one thread. Per device, since a
  // handle belongs to the device current when it was made. Not per stream:
  // stream addresses are reused after cudaStreamDestroy, so the stream is
  // set on every use instead (a cheap setter).
  thread_local std::map<int, cublasHandle_t> handles;
  const int device = current_device();
  cublasHandle_t h = nullptr;
  auto it = handles.find(device);
  if (it != handles.end()) {
    h = it->second;
  } else {
    TUTTI_CUBLAS_CHECK(cublas().create(&h));
    // fp32 means fp32: no TF32 tensor-core shortcut behind the caller's back.
    TUTTI_CUBLAS_CHECK(cublas().set_math_mode(h, CUBLAS_DEFAULT_MATH));
    // Handles are deliberately never destroyed: destroying one after the
    // CUDA context is torn down at process exit fails, and there are few
    // (threads x devices).
    handles.emplace(device, h);
  }
  TUTTI_CUBLAS_CHECK(cublas().set_stream(h, raw(s)));
  return h;
}

namespace {

// One buffer per (device, stream, slot), each with its own lock: a stream is
// driven by one rank's thread, so the lock is uncontended, and one rank
// growing its scratch never holds up another's.
struct scratch_block {
  std::mutex mutex;
  void* ptr = nullptr;
  size_t bytes = 0;
};

// Guards the index only; never held across a CUDA call that can wait.
std::mutex scratch_index_mutex;
std::map<std::tuple<int, cudaStream_t, int>, std::unique_ptr<scratch_block>>
  scratch_blocks;
std::map<int, bool> device_has_pools;

scratch_block& block_for(const stream& s, scratch_slot slot, bool& pools) {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(scratch_index_mutex);
  auto it = device_has_pools.find(device);
  if (it == device_has_pools.end()) {
    int supported = 0;
    TUTTI_CUDA_CHECK(cudaDeviceGetAttribute(
      &supported, cudaDevAttrMemoryPoolsSupported, device));
    it = device_has_pools.emplace(device, supported != 0).first;
  }
  pools = it->second;
  auto& b = scratch_blocks[std::make_tuple(device, raw(s), int(slot))];
  if (!b)
    b = std::make_unique<scratch_block>();
  return *b;
}

} // namespace

void* scratch(const stream& s, size_t bytes, scratch_slot slot) {
  bool pools = false;
  scratch_block& b = block_for(s, slot, pools);
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.bytes >= bytes && b.ptr != nullptr)
    return b.ptr;
  // Grow by half again, so a slowly growing size does not reallocate often.
  const size_t want = bytes + bytes / 2 + 4096;
  if (pools) {
    // Stream-ordered: the old buffer is freed after the work already queued
    // on s (which may still read it), the new one is ready for the work
    // queued next; the host never waits.
    if (b.ptr != nullptr)
      TUTTI_CUDA_CHECK(cudaFreeAsync(b.ptr, raw(s)));
    b.ptr = nullptr;
    TUTTI_CUDA_CHECK(cudaMallocAsync(&b.ptr, want, raw(s)));
  } else {
    if (b.ptr != nullptr) {
      // Earlier work on this stream may still read the old buffer.
      TUTTI_CUDA_CHECK(cudaStreamSynchronize(raw(s)));
      TUTTI_CUDA_CHECK(cudaFree(b.ptr));
    }
    b.ptr = nullptr;
    TUTTI_CUDA_CHECK(cudaMalloc(&b.ptr, want));
  }
  b.bytes = want;
  return b.ptr;
}

void release_scratch(void* stream_handle) {
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  std::vector<std::unique_ptr<scratch_block>> released;
  {
    std::lock_guard<std::mutex> lock(scratch_index_mutex);
    for (auto it = scratch_blocks.begin(); it != scratch_blocks.end();) {
      if (std::get<1>(it->first) == stream) {
        released.push_back(std::move(it->second));
        it = scratch_blocks.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Outside the index lock: cudaFree waits for the device. The stream is
  // drained (its owner synchronized it before this); cudaFree also takes
  // memory from cudaMallocAsync.
  for (const auto& b : released)
    if (b->ptr != nullptr)
      cudaFree(b->ptr);
}

} // namespace tutti::kernels::cuda
