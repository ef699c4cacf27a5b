// The real nccl_calls (nccl_calls.hpp): NCCL through dlopen, CUDA through
// the runtime linked into tutti.

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "nccl_calls.hpp"

namespace tutti::comm::detail {

const char* nccl_result_name(ncclResult_t result) {
  switch (result) {
  case ncclSuccess: return "ncclSuccess (no error)";
  case ncclUnhandledCudaError: return "ncclUnhandledCudaError (a CUDA call failed)";
  case ncclSystemError: return "ncclSystemError (a system call failed)";
  case ncclInternalError: return "ncclInternalError";
  case ncclInvalidArgument: return "ncclInvalidArgument";
  case ncclInvalidUsage: return "ncclInvalidUsage";
  case ncclRemoteError: return "ncclRemoteError (a peer failed)";
  case ncclInProgress: return "ncclInProgress";
  default: return "unknown NCCL result";
  }
}

namespace {

const std::string library_name = "libnccl.so." + std::to_string(NCCL_MAJOR);

class library_calls final : public nccl_calls {
public:
  // Fills every entry or says which symbol is missing.
  status load(void* lib) {
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclGetUniqueId", get_unique_id_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclCommInitRankConfig", init_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclCommGetAsyncError", async_error_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclCommFinalize", finalize_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclCommDestroy", destroy_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclCommAbort", abort_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclAllReduce", all_reduce_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclGroupStart", group_start_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclGroupEnd", group_end_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclSend", send_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclRecv", recv_));
    TUTTI_RETURN_IF_ERROR(bind(lib, "ncclGetLastError", last_error_));
    return {};
  }

  ncclResult_t get_unique_id(ncclUniqueId* id) override {
    return get_unique_id_(id);
  }
  ncclResult_t comm_init_rank_config(ncclComm_t* comm, int size,
                                     ncclUniqueId id, int rank,
                                     ncclConfig_t* config) override {
    return init_(comm, size, id, rank, config);
  }
  ncclResult_t comm_get_async_error(ncclComm_t comm,
                                    ncclResult_t* state) override {
    return async_error_(comm, state);
  }
  ncclResult_t comm_finalize(ncclComm_t comm) override {
    return finalize_(comm);
  }
  ncclResult_t comm_destroy(ncclComm_t comm) override { return destroy_(comm); }
  ncclResult_t comm_abort(ncclComm_t comm) override { return abort_(comm); }
  ncclResult_t all_reduce(const void* send, void* recv, size_t count,
                          ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                          cudaStream_t stream) override {
    return all_reduce_(send, recv, count, type, op, comm, stream);
  }
  ncclResult_t group_start() override { return group_start_(); }
  ncclResult_t group_end() override { return group_end_(); }
  ncclResult_t send(const void* data, size_t count, ncclDataType_t type,
                    int peer, ncclComm_t comm, cudaStream_t stream) override {
    return send_(data, count, type, peer, comm, stream);
  }
  ncclResult_t recv(void* data, size_t count, ncclDataType_t type, int peer,
                    ncclComm_t comm, cudaStream_t stream) override {
    return recv_(data, count, type, peer, comm, stream);
  }
  const char* last_error(ncclComm_t comm) override { return last_error_(comm); }

  cudaError_t set_device(int device) override { return cudaSetDevice(device); }
  cudaError_t is_device_pointer(const void* p, bool* device) override {
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, p);
    *device = attr.type == cudaMemoryTypeDevice
              || attr.type == cudaMemoryTypeManaged;
    return e;
  }
  cudaError_t memcpy_async(void* dst, const void* src, size_t bytes,
                           cudaMemcpyKind kind, cudaStream_t stream) override {
    return cudaMemcpyAsync(dst, src, bytes, kind, stream);
  }
  cudaError_t stream_query(cudaStream_t stream) override {
    return cudaStreamQuery(stream);
  }
  cudaError_t stream_synchronize(cudaStream_t stream) override {
    return cudaStreamSynchronize(stream);
  }
  cudaError_t stream_create(cudaStream_t* stream) override {
    return cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking);
  }
  cudaError_t stream_destroy(cudaStream_t stream) override {
    return cudaStreamDestroy(stream);
  }
  cudaError_t device_malloc(void** p, size_t bytes) override {
    return cudaMalloc(p, bytes);
  }
  cudaError_t device_free(void* p) override { return cudaFree(p); }

private:
  template <class F>
  static status bind(void* lib, const char* symbol, F& out) {
    out = reinterpret_cast<F>(dlsym(lib, symbol));
    if (out == nullptr)
      return status::error(library_name + " has no " + symbol
                           + " (NCCL 2.14 or newer is needed)");
    return {};
  }

  decltype(&::ncclGetUniqueId) get_unique_id_ = nullptr;
  decltype(&::ncclCommInitRankConfig) init_ = nullptr;
  decltype(&::ncclCommGetAsyncError) async_error_ = nullptr;
  decltype(&::ncclCommFinalize) finalize_ = nullptr;
  decltype(&::ncclCommDestroy) destroy_ = nullptr;
  decltype(&::ncclCommAbort) abort_ = nullptr;
  decltype(&::ncclAllReduce) all_reduce_ = nullptr;
  decltype(&::ncclGroupStart) group_start_ = nullptr;
  decltype(&::ncclGroupEnd) group_end_ = nullptr;
  decltype(&::ncclSend) send_ = nullptr;
  decltype(&::ncclRecv) recv_ = nullptr;
  decltype(&::ncclGetLastError) last_error_ = nullptr;
};

} // namespace

status load_nccl_calls(std::shared_ptr<nccl_calls>& out) {
  // Loaded once; never unloaded (communicators may live until exit). A
  // failed load is not remembered, so a later call tries again.
  static std::mutex mutex;
  static std::shared_ptr<nccl_calls> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded) {
    void* lib = dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef TUTTI_NCCL_DIR
    if (lib == nullptr) // the toolkit tutti was built against
      lib = dlopen((std::string(TUTTI_NCCL_DIR) + "/" + library_name).c_str(),
                   RTLD_NOW | RTLD_LOCAL);
#endif
    if (lib == nullptr) {
      const char* why = dlerror();
      return status::error("cannot load NCCL (" + library_name
                           + "): " + (why ? why : "unknown reason")
                           + "; put its directory on LD_LIBRARY_PATH");
    }
    auto calls = std::make_shared<library_calls>();
    TUTTI_RETURN_IF_ERROR(calls->load(lib));
    loaded = std::move(calls);
  }
  out = loaded;
  return {};
}

} // namespace tutti::comm::detail
