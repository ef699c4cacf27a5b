#pragma once
// Every CUDA and cuBLAS call of the kernels goes through these macros, after
// the CUDA_CHECK / NCCLCHECK pattern of NCCL and DeepEP: a failure throws
// tutti::kernels::device_error naming the call, the error and file:line.
// The kernel API returns no status (CPU kernels cannot fail), so an
// exception is how a device failure reaches the actor that drives the rank,
// which turns it into an error value at its own boundary.
//
// Plain C++: included from .cu files and from host-only .cpp files alike.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "tutti/kernels/device_memory.hpp"

namespace tutti::kernels::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call,
                                   const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call,
                                     const char* file, int line);
[[noreturn]] void throw_usage_error(const char* what, const char* file,
                                    int line);
// Frees the per-stream scratch memory of a drained stream about to be
// destroyed: a new stream may reuse its address, and a restarted expert
// shard makes a new stream each time (cuda_context.cu).
void release_scratch(void* stream_handle);

} // namespace tutti::kernels::cuda

#define TUTTI_CUDA_CHECK(call)                                                 \
  do {                                                                         \
    const cudaError_t tutti_cuda_error_ = (call);                              \
    if (tutti_cuda_error_ != cudaSuccess)                                      \
      ::tutti::kernels::cuda::throw_cuda_error(tutti_cuda_error_, #call,       \
                                               __FILE__, __LINE__);            \
  } while (false)

#define TUTTI_CUBLAS_CHECK(call)                                               \
  do {                                                                         \
    const cublasStatus_t tutti_cublas_status_ = (call);                        \
    if (tutti_cublas_status_ != CUBLAS_STATUS_SUCCESS)                         \
      ::tutti::kernels::cuda::throw_cublas_error(tutti_cublas_status_, #call,  \
                                                 __FILE__, __LINE__);          \
  } while (false)

// After every <<<...>>>: a bad launch configuration shows up here, at the
// launch's own file:line, rather than at some later call.
#define TUTTI_CUDA_LAUNCH_CHECK() TUTTI_CUDA_CHECK(cudaGetLastError())

// Argument checks that need no device (sizes cuBLAS cannot take, ...).
#define TUTTI_DEVICE_REQUIRE(cond, what)                                       \
  do {                                                                         \
    if (!(cond))                                                               \
      ::tutti::kernels::cuda::throw_usage_error(what, __FILE__, __LINE__);     \
  } while (false)
