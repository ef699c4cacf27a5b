// device_memory.hpp: buffers, copies and streams over the CUDA runtime, and
// the error reporting behind the check macros. Plain C++ (no kernels), so it
// is compiled by the host compiler in both builds; without CUDA every entry
// point says so.

#include "tutti/kernels/device_memory.hpp"

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#ifdef TUTTI_WITH_CUDA
#include <cuda_runtime_api.h>

#include "cuda/cublas_loader.hpp"
#include "cuda/cuda_check.hpp"
#endif

namespace tutti::kernels {

#ifdef TUTTI_WITH_CUDA

namespace cuda {

void throw_cuda_error(cudaError_t error, const char* call, const char* file,
                      int line) {
  throw device_error(std::string("CUDA error ") + cudaGetErrorName(error) + " ("
                     + cudaGetErrorString(error) + ") at " + file + ":"
                     + std::to_string(line) + ": " + call);
}

void throw_cublas_error(cublasStatus_t status, const char* call,
                        const char* file, int line) {
  throw device_error(std::string("cuBLAS error ") + cublas().status_name(status)
                     + " (" + cublas().status_string(status) + ") at " + file
                     + ":" + std::to_string(line) + ": " + call);
}

void throw_usage_error(const char* what, const char* file, int line) {
  throw device_error(std::string("CUDA backend: ") + what + " at " + file + ":"
                     + std::to_string(line));
}

} // namespace cuda

namespace {
cudaStream_t raw(const stream& s) {
  return static_cast<cudaStream_t>(s.handle);
}

void require_cuda(const stream& s, const char* what) {
  if (s.device != device_kind::cuda)
    throw std::invalid_argument(std::string(what) + ": not a cuda stream");
}
} // namespace

status cuda_device_available() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    std::string why = std::string("no usable CUDA driver/device: ")
                      + cudaGetErrorName(e) + " (" + cudaGetErrorString(e)
                      + ")";
    if (e == cudaErrorInsufficientDriver)
      why += "; no NVIDIA driver is loaded here, or it is older than the "
             "CUDA runtime tutti was built with";
    cudaGetLastError(); // reset the runtime's last-error slot
    return status::error(why);
  }
  if (count == 0) {
    return status::error("the CUDA driver reports no device");
  }
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess
      || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return status::error("cannot query the current CUDA device");
  }
  if (prop.major < 9) {
    return status::error(std::string(prop.name) + " is sm_"
                         + std::to_string(prop.major)
                         + std::to_string(prop.minor)
                         + "; the backend is built for sm_90 and newer");
  }
  // Making the context is where a broken driver/runtime pairing shows up.
  const cudaError_t ctx = cudaFree(nullptr);
  if (ctx != cudaSuccess) {
    return status::error(std::string("cannot create a CUDA context: ")
                         + cudaGetErrorName(ctx) + " ("
                         + cudaGetErrorString(ctx) + ")");
  }
  return {};
}

std::string cuda_device_description() {
  int device = 0, driver = 0, runtime = 0;
  cudaDeviceProp prop{};
  TUTTI_CUDA_CHECK(cudaGetDevice(&device));
  TUTTI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  TUTTI_CUDA_CHECK(cudaDriverGetVersion(&driver));
  TUTTI_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  char line[512];
  std::snprintf(line, sizeof(line),
                "%s, sm_%d%d, %d SMs, %.1f GiB; driver %d.%d, runtime %d.%d",
                prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                double(prop.totalGlobalMem) / double(1ull << 30), driver / 1000,
                (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
  return line;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void cuda_set_device(int ordinal) { TUTTI_CUDA_CHECK(cudaSetDevice(ordinal)); }

device_buffer::device_buffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0)
    TUTTI_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

device_buffer::~device_buffer() {
  // No throw from a destructor; a failing cudaFree here means the context
  // is already gone (process exit) or broken, and there is nothing to do.
  if (ptr_ != nullptr)
    cudaFree(ptr_);
}

device_buffer::device_buffer(device_buffer&& other) noexcept
  : ptr_(std::exchange(other.ptr_, nullptr)),
    bytes_(std::exchange(other.bytes_, 0)) {}

device_buffer& device_buffer::operator=(device_buffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr)
      cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void copy_to_device(const stream& s, void* dst, const void* src, size_t bytes) {
  require_cuda(s, "copy_to_device");
  if (bytes == 0)
    return;
  TUTTI_CUDA_CHECK(
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, raw(s)));
  TUTTI_CUDA_CHECK(cudaStreamSynchronize(raw(s)));
}

void copy_to_host(const stream& s, void* dst, const void* src, size_t bytes) {
  require_cuda(s, "copy_to_host");
  if (bytes == 0)
    return;
  TUTTI_CUDA_CHECK(
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, raw(s)));
  TUTTI_CUDA_CHECK(cudaStreamSynchronize(raw(s)));
}

void copy_device_to_device(const stream& s, void* dst, const void* src,
                           size_t bytes) {
  require_cuda(s, "copy_device_to_device");
  if (bytes == 0)
    return;
  TUTTI_CUDA_CHECK(
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, raw(s)));
}

void zero_device_bytes(const stream& s, void* dst, size_t bytes) {
  require_cuda(s, "zero_device_bytes");
  if (bytes == 0)
    return;
  TUTTI_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, raw(s)));
}

void synchronize(const stream& s) {
  require_cuda(s, "synchronize");
  TUTTI_CUDA_CHECK(cudaStreamSynchronize(raw(s)));
}

device_stream::device_stream(gemm_precision gemm) : gemm_(gemm) {
  cudaStream_t h = nullptr;
  TUTTI_CUDA_CHECK(cudaStreamCreateWithFlags(&h, cudaStreamNonBlocking));
  handle_ = h;
}

device_stream::~device_stream() {
  // Drain first: the backend keys scratch memory by stream address, and a
  // new stream may get this address as soon as it is destroyed.
  if (handle_ == nullptr)
    return;
  cudaStreamSynchronize(static_cast<cudaStream_t>(handle_));
  cuda::release_scratch(handle_);
  cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}

#else // !TUTTI_WITH_CUDA

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw std::logic_error(std::string("tutti built without CUDA: ") + what);
}
} // namespace

status cuda_device_available() {
  return status::error(
    "tutti was built without the CUDA backend (no nvcc at configure time,"
    " or TUTTI_DISABLE_CUDA=ON)");
}
std::string cuda_device_description() { no_cuda("cuda_device_description"); }
int cuda_device_count() { return 0; }
void cuda_set_device(int) { no_cuda("cuda_set_device"); }
device_buffer::device_buffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0)
    no_cuda("device_buffer");
}
device_buffer::~device_buffer() = default;
device_buffer::device_buffer(device_buffer&& other) noexcept
  : ptr_(std::exchange(other.ptr_, nullptr)),
    bytes_(std::exchange(other.bytes_, 0)) {}
device_buffer& device_buffer::operator=(device_buffer&& other) noexcept {
  ptr_ = std::exchange(other.ptr_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  return *this;
}
void copy_to_device(const stream&, void*, const void*, size_t) {
  no_cuda("copy_to_device");
}
void copy_to_host(const stream&, void*, const void*, size_t) {
  no_cuda("copy_to_host");
}
void copy_device_to_device(const stream&, void*, const void*, size_t) {
  no_cuda("copy_device_to_device");
}
void zero_device_bytes(const stream&, void*, size_t) {
  no_cuda("zero_device_bytes");
}
void synchronize(const stream&) { no_cuda("synchronize"); }
device_stream::device_stream(gemm_precision gemm) : gemm_(gemm) {
  no_cuda("device_stream");
}
device_stream::~device_stream() = default;

#endif

// Either kind of stream: on a cpu stream both sides are host memory.
void upload(const stream& s, void* dst, const void* host_src, size_t bytes) {
  if (s.device == device_kind::cuda)
    copy_to_device(s, dst, host_src, bytes);
  else if (bytes > 0)
    std::memcpy(dst, host_src, bytes);
}

void download(const stream& s, void* host_dst, const void* src, size_t bytes) {
  if (s.device == device_kind::cuda)
    copy_to_host(s, host_dst, src, bytes);
  else if (bytes > 0)
    std::memcpy(host_dst, src, bytes);
}

void copy_on(const stream& s, void* dst, const void* src, size_t bytes) {
  if (s.device == device_kind::cuda)
    copy_device_to_device(s, dst, src, bytes);
  else if (bytes > 0 && dst != src)
    std::memmove(dst, src, bytes);
}

void zero_bytes(const stream& s, void* dst, size_t bytes) {
  if (s.device == device_kind::cuda)
    zero_device_bytes(s, dst, bytes);
  else if (bytes > 0)
    std::memset(dst, 0, bytes);
}

void wait(const stream& s) {
  if (s.device == device_kind::cuda)
    synchronize(s);
}

} // namespace tutti::kernels
