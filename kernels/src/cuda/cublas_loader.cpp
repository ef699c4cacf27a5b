// cublas_loader.hpp: dlopen + dlsym, once per process.

#include "cublas_loader.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "tutti/kernels/device_memory.hpp"

namespace tutti::kernels::cuda {

namespace {

const std::string library_name = "libcublas.so."
                                 + std::to_string(CUBLAS_VER_MAJOR);

template <class F>
void bind(void* lib, const char* symbol, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, symbol));
  if (out == nullptr)
    throw device_error("cuBLAS: " + library_name + " has no " + symbol);
}

cublas_api load() {
  // RTLD_LOCAL: cuBLAS's symbols stay out of the global namespace; it
  // finds cublasLt through its own DT_NEEDED and RUNPATH.
  void* lib = dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef TUTTI_CUBLAS_DIR
  // Then the toolkit tutti was built against, as a linked program would.
  if (lib == nullptr)
    lib = dlopen((std::string(TUTTI_CUBLAS_DIR) + "/" + library_name).c_str(),
                 RTLD_NOW | RTLD_LOCAL);
#endif
  if (lib == nullptr) {
    const char* why = dlerror();
    throw device_error("cannot load cuBLAS (" + library_name
                       + "): " + (why ? why : "unknown reason")
                       + "; put its directory on LD_LIBRARY_PATH");
  }
  cublas_api api{};
  bind(lib, "cublasCreate_v2", api.create);
  bind(lib, "cublasSetMathMode", api.set_math_mode);
  bind(lib, "cublasSetStream_v2", api.set_stream);
  bind(lib, "cublasGemmEx", api.gemm_ex);
  bind(lib, "cublasGetStatusName", api.status_name);
  bind(lib, "cublasGetStatusString", api.status_string);
  return api; // never dlclose'd: handles live until the process ends
}

} // namespace

const cublas_api& cublas() {
  static std::once_flag once;
  static cublas_api api;
  // A failed load throws out of call_once, which lets the next call retry
  // (and fail with the same message).
  std::call_once(once, [] { api = load(); });
  return api;
}

} // namespace tutti::kernels::cuda
