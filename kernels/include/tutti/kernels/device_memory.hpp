#pragma once
// Device memory, copies and streams for the CUDA backend, with no CUDA
// header in sight: host-only code (actors, tests, benches) uses the backend
// through this and ops.hpp and compiles without the toolkit.
//
// Memory comes from plain cudaMalloc, never managed memory: on the shared GPU
// machines an oversubscribed managed allocation can hang the device.
// Built without CUDA, everything here except cuda_device_available throws
// std::logic_error.

#include <cstddef>
#include <stdexcept>
#include <string>

#include "tutti/kernels/stream.hpp"

#include "tutti/base/status.hpp"

namespace tutti::kernels {

// What the CUDA backend throws on a failed CUDA or cuBLAS call: the call,
// the error's name and text, and file:line.
class device_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// True when the backend is built and a device it can run on answers: the
// driver loads, a device exists, a context can be made on the current
// device and it is sm_90 or newer (the backend carries Hopper code + PTX).
// Otherwise the status says what is missing.
status cuda_device_available();

// One line about the current device, for logs and bench tables, e.g.
// "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB; driver 13.0, runtime 13.0".
std::string cuda_device_description();

// How many CUDA devices answer (0 where none does, or without CUDA).
int cuda_device_count();

// Makes `ordinal` the calling thread's current device.
void cuda_set_device(int ordinal);

// cudaMalloc'd bytes, freed on destruction. Move-only.
class device_buffer {
public:
  device_buffer() = default;
  explicit device_buffer(size_t bytes);
  ~device_buffer();
  device_buffer(device_buffer&& other) noexcept;
  device_buffer& operator=(device_buffer&& other) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// `count` elements of T in device memory.
template <class T>
class device_array {
public:
  device_array() = default;
  explicit device_array(size_t count)
    : buf_(count * sizeof(T)), count_(count) {}
  T* data() const { return buf_.as<T>(); }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

private:
  device_buffer buf_;
  size_t count_ = 0;
};

// Host <-> device copies on `s`. Both return once the copy is complete (they
// synchronize the stream): they are for setup, tests and snapshots, where
// host memory may be pageable and must be reusable on return.
void copy_to_device(const stream& s, void* device_dst, const void* host_src,
                    size_t bytes);
void copy_to_host(const stream& s, void* host_dst, const void* device_src,
                  size_t bytes);
// Asynchronous on `s`.
void copy_device_to_device(const stream& s, void* dst, const void* src,
                           size_t bytes);
// Asynchronous on `s`: cudaMemsetAsync to 0.
void zero_device_bytes(const stream& s, void* dst, size_t bytes);
// Waits for everything queued on `s`.
void synchronize(const stream& s);

// The same on either kind of stream: "device memory" is the memory of the
// stream's device, which on a cpu stream is host memory (memcpy / memset,
// no wait). The model and the actors write one code path with these, and
// the CPU runs that CI makes exercise it.
//   upload / download: host <-> the stream's memory; complete on return.
//   copy_on / zero_bytes: within the stream's memory; queued on `s`.
//   wait: everything queued on `s` is done (no-op on cpu).
void upload(const stream& s, void* dst, const void* host_src, size_t bytes);
void download(const stream& s, void* host_dst, const void* src, size_t bytes);
void copy_on(const stream& s, void* dst, const void* src, size_t bytes);
void zero_bytes(const stream& s, void* dst, size_t bytes);
void wait(const stream& s);

// A CUDA stream owned by this object, on the current device, that does not
// synchronize with the legacy default stream. get() is the kernel stream.
class device_stream {
public:
  explicit device_stream(gemm_precision gemm = gemm_precision::fp32);
  ~device_stream();
  device_stream(const device_stream&) = delete;
  device_stream& operator=(const device_stream&) = delete;

  stream get() const { return cuda_stream(handle_, gemm_); }
  void* handle() const { return handle_; }

private:
  void* handle_ = nullptr;
  gemm_precision gemm_;
};

} // namespace tutti::kernels
