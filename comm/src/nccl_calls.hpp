#pragma once
// The seam between the NCCL communicator and the libraries it drives: the
// NCCL functions it calls and the CUDA calls around them (device, stream,
// staging copies), as one small interface. The real one loads
// libnccl.so.<major> on first use (nccl_library.cpp), so no tutti program
// needs NCCL to start and a GPU machine without it fails one step, not
// all; a test double drives the communicator's locking and abort paths on
// a machine without a GPU (tests/comm/test_nccl_locking.cpp).
//
// Only types come from nccl.h and cuda_runtime_api.h here.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>

#include "tutti/comm/nccl_communicator.hpp"

namespace gloo::rendezvous {
class Store;
}

namespace tutti::comm::detail {

class nccl_calls {
public:
  virtual ~nccl_calls() = default;

  // NCCL, one to one with the library's functions of the same name.
  virtual ncclResult_t get_unique_id(ncclUniqueId* id) = 0;
  virtual ncclResult_t comm_init_rank_config(ncclComm_t* comm, int size,
                                             ncclUniqueId id, int rank,
                                             ncclConfig_t* config) = 0;
  virtual ncclResult_t comm_get_async_error(ncclComm_t comm,
                                            ncclResult_t* state) = 0;
  virtual ncclResult_t comm_finalize(ncclComm_t comm) = 0;
  virtual ncclResult_t comm_destroy(ncclComm_t comm) = 0;
  virtual ncclResult_t comm_abort(ncclComm_t comm) = 0;
  virtual ncclResult_t all_reduce(const void* send, void* recv, size_t count,
                                  ncclDataType_t type, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t group_start() = 0;
  virtual ncclResult_t group_end() = 0;
  virtual ncclResult_t send(const void* data, size_t count,
                            ncclDataType_t type, int peer, ncclComm_t comm,
                            cudaStream_t stream) = 0;
  virtual ncclResult_t recv(void* data, size_t count, ncclDataType_t type,
                            int peer, ncclComm_t comm, cudaStream_t stream) = 0;
  virtual const char* last_error(ncclComm_t comm) = 0;

  // CUDA, for the communicator's device and stream.
  virtual cudaError_t set_device(int device) = 0;
  virtual cudaError_t is_device_pointer(const void* p, bool* device) = 0;
  virtual cudaError_t memcpy_async(void* dst, const void* src, size_t bytes,
                                   cudaMemcpyKind kind,
                                   cudaStream_t stream) = 0;
  // cudaSuccess when everything queued on the stream is done,
  // cudaErrorNotReady while it runs.
  virtual cudaError_t stream_query(cudaStream_t stream) = 0;
  virtual cudaError_t stream_synchronize(cudaStream_t stream) = 0;
  virtual cudaError_t stream_create(cudaStream_t* stream) = 0;
  virtual cudaError_t stream_destroy(cudaStream_t stream) = 0;
  virtual cudaError_t device_malloc(void** p, size_t bytes) = 0;
  virtual cudaError_t device_free(void* p) = 0;
};

// The real libraries: NCCL loaded once per process (libnccl.so.<major>
// from LD_LIBRARY_PATH, then the toolkit tutti was built against), the
// CUDA runtime linked in. An error names the library and why it did not
// load.
status load_nccl_calls(std::shared_ptr<nccl_calls>& out);

// make_nccl_communicator over the given calls: rendezvous through `store`,
// then ncclCommInitRankConfig (non-blocking) on options.device (>= 0).
status make_nccl_communicator_over(std::shared_ptr<nccl_calls> calls,
                                   gloo::rendezvous::Store& store, int rank,
                                   int size, const nccl_options& options,
                                   std::unique_ptr<nccl_communicator>& out);

// Text for an NCCL result without the library (its codes are fixed by
// nccl.h), for errors raised where the library may not be loaded.
const char* nccl_result_name(ncclResult_t result);

} // namespace tutti::comm::detail
