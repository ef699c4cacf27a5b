// Per-thread cuBLAS handles and per-stream scratch memory of the CUDA
// backend.

#include <map>
#include <mutex>
#include <tuple>

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

struct scratch_block {
  void* ptr = nullptr;
  size_t bytes = 0;
};

std::mutex scratch_mutex;
// (device, stream, slot) -> buffer. Shared across threads (a stream may be
// used from another thread than the one that first used it).
std::map<std::tuple<int, cudaStream_t, int>, scratch_block> scratch_blocks;

} // namespace

void* scratch(const stream& s, size_t bytes, scratch_slot slot) {
  const auto key = std::make_tuple(current_device(), raw(s), int(slot));
  std::lock_guard<std::mutex> lock(scratch_mutex);
  scratch_block& b = scratch_blocks[key];
  if (b.bytes >= bytes && b.ptr != nullptr)
    return b.ptr;
  if (b.ptr != nullptr) {
    // Earlier work on this stream may still read the old buffer.
    TUTTI_CUDA_CHECK(cudaStreamSynchronize(raw(s)));
    TUTTI_CUDA_CHECK(cudaFree(b.ptr));
    b = {};
  }
  // Grow by half again, so a slowly growing size does not reallocate often.
  const size_t want = bytes + bytes / 2 + 4096;
  TUTTI_CUDA_CHECK(cudaMalloc(&b.ptr, want));
  b.bytes = want;
  return b.ptr;
}

void release_scratch(void* stream_handle) {
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  std::lock_guard<std::mutex> lock(scratch_mutex);
  for (auto it = scratch_blocks.begin(); it != scratch_blocks.end();) {
    if (std::get<1>(it->first) == stream) {
      // The stream is drained (its owner synchronized it before this).
      if (it->second.ptr != nullptr)
        cudaFree(it->second.ptr);
      it = scratch_blocks.erase(it);
    } else {
      ++it;
    }
  }
}

} // namespace tutti::kernels::cuda
