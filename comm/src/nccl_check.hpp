#pragma once
// Every NCCL and CUDA call of the NCCL communicator goes through these, as
// TUTTI_GLOO_CHECK does for Gloo: a failure returns a status from the
// enclosing function naming the call, the error and file:line.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0), so
// ncclInProgress means "issued, still running" and is not a failure; the
// caller then waits for completion with the communicator's progress loop.
// NCCL is reached through nccl_calls (loaded at run time), so the result's
// name comes from nccl_result_name, which needs no library.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "nccl_calls.hpp"
#include "tutti/base/status.hpp"

#define TUTTI_NCCL_CHECK(call)                                                 \
  do {                                                                         \
    const ncclResult_t tutti_nccl_result_ = (call);                            \
    if (tutti_nccl_result_ != ncclSuccess                                      \
        && tutti_nccl_result_ != ncclInProgress)                               \
      return ::tutti::status::error(                                           \
        std::string("NCCL error ")                                             \
        + ::tutti::comm::detail::nccl_result_name(tutti_nccl_result_) + " at " \
        + __FILE__ + ":" + std::to_string(__LINE__) + ": " + #call);           \
  } while (false)

#define TUTTI_COMM_CUDA_CHECK(call)                                            \
  do {                                                                         \
    const cudaError_t tutti_cuda_error_ = (call);                              \
    if (tutti_cuda_error_ != cudaSuccess)                                      \
      return ::tutti::status::error(                                           \
        std::string("CUDA error ") + cudaGetErrorName(tutti_cuda_error_)       \
        + " (" + cudaGetErrorString(tutti_cuda_error_) + ") at " + __FILE__    \
        + ":" + std::to_string(__LINE__) + ": " + #call);                      \
  } while (false)
