// The first step of bench/gpu_check.sh on a GPU machine: can the carried
// build run here at all? It prints what it finds, then one verdict line:
//
//   driver    the CUDA version the driver supports (cudaDriverGetVersion)
//             against the runtime linked into the carry (static, CUDART_VERSION)
//   device    what cudaGetDeviceCount / cudaGetDeviceProperties say
//   cublas    libcublas.so.<major built against>: dlopen'ed by the same name
//             the kernels use (it pulls libcublasLt.so.<major> in)
//   nccl      libnccl.so.<major>: dlopen'ed by the same name the NCCL
//             communicator uses
//
// Exit status: 0 ready; 3 ready for the kernels but not NCCL (NCCL steps
// skip); 1 cannot run the carry (the verdict says why); 77 no device here.
// Links only the static CUDA runtime and libdl, so it starts wherever the
// driver's libcuda.so.1 does, or says why not.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <string>

#ifdef TUTTI_PROBE_NCCL
#include <nccl.h>
#endif

namespace {

std::string version_text(int v) { // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// Path of a dlopen'ed library, for the log.
std::string loaded_path(void* lib) {
  link_map* map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr)
    return map->l_name;
  return "?";
}

struct library {
  bool found = false;
  std::string line; // what to print: path and version, or why not
};

library probe_cublas() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return {false, name + " not loadable: " + (why ? why : "?")};
  }
  using get_property_fn = cublasStatus_t (*)(libraryPropertyType, int*);
  auto get = reinterpret_cast<get_property_fn>(dlsym(lib, "cublasGetProperty"));
  int major = 0, minor = 0, patch = 0;
  if (get != nullptr) {
    get(MAJOR_VERSION, &major);
    get(MINOR_VERSION, &minor);
    get(PATCH_LEVEL, &patch);
  }
  return {true, name + " " + std::to_string(major) + "." + std::to_string(minor)
                  + "." + std::to_string(patch) + " at " + loaded_path(lib)};
}

library probe_nccl() {
#ifdef TUTTI_PROBE_NCCL
  const std::string name = "libnccl.so." + std::to_string(NCCL_MAJOR);
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return {false, name + " not loadable: " + (why ? why : "?")};
  }
  using get_version_fn = ncclResult_t (*)(int*);
  auto get = reinterpret_cast<get_version_fn>(dlsym(lib, "ncclGetVersion"));
  int code = 0;
  if (get == nullptr || get(&code) != ncclSuccess)
    return {false, name + " at " + loaded_path(lib) + " has no ncclGetVersion"};
  // 2.14 brought non-blocking communicators (ncclCommInitRankConfig,
  // ncclCommFinalize), which the communicator's abort and timeouts rest on.
  const int major = code / 10000, minor = (code / 100) % 100;
  const std::string text = name + " " + std::to_string(major) + "."
                           + std::to_string(minor) + "." + std::to_string(code % 100)
                           + " at " + loaded_path(lib);
  if (major < 2 || (major == 2 && minor < 14))
    return {false, text + ": older than 2.14 (no non-blocking communicators)"};
  return {true, text};
#else
  return {false, "this build has no NCCL communicator"};
#endif
}

} // namespace

int main() {
  std::printf("carry built with: CUDA runtime %s (static), cuBLAS %d\n",
              version_text(CUDART_VERSION).c_str(), CUBLAS_VER_MAJOR);

  int driver = 0;
  cudaDriverGetVersion(&driver);
  if (driver == 0) {
    std::printf("driver: none (no libcuda.so.1 loads here)\n"
                "verdict: no device: no NVIDIA driver on this machine\n");
    return 77;
  }
  std::printf("driver: supports CUDA %s\n", version_text(driver).c_str());
  // Minor-version compatibility: a runtime of major M runs on any driver of
  // major M (the carry holds sm_90 machine code, so no newer PTX to JIT);
  // an older major cannot load it at all.
  if (driver / 1000 < CUDART_VERSION / 1000) {
    std::printf("verdict: cannot run: the driver supports CUDA %s, the carry "
                "needs CUDA %d.x (driver >= %s); rebuild the carry with a CUDA "
                "%d toolkit or use a machine with a newer driver\n",
                version_text(driver).c_str(), CUDART_VERSION / 1000,
                CUDART_VERSION / 1000 >= 13 ? "580" : "525",
                driver / 1000);
    return 1;
  }

  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
    std::printf("device: none\nverdict: no device: the driver sees no GPU\n");
    return 77;
  }
  if (e != cudaSuccess) {
    std::printf("device: %s (%s)\nverdict: cannot run: the CUDA runtime "
                "cannot use the driver\n",
                cudaGetErrorName(e), cudaGetErrorString(e));
    return 1;
  }
  bool hopper = true;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess)
      continue;
    std::printf("device %d: %s, sm_%d%d, %.1f GiB\n", d, prop.name, prop.major,
                prop.minor, double(prop.totalGlobalMem) / double(1ull << 30));
    hopper = hopper && prop.major >= 9;
  }
  const library cublas = probe_cublas(), nccl = probe_nccl();
  std::printf("cublas: %s\nnccl: %s\n", cublas.line.c_str(), nccl.line.c_str());

  if (!hopper) {
    std::printf("verdict: cannot run: the carry holds sm_90 code and "
                "compute_90 PTX; this GPU is older than Hopper\n");
    return 1;
  }
  if (!cublas.found) {
    std::printf("verdict: cannot run: no loadable libcublas.so.%d (and its "
                "libcublasLt) on LD_LIBRARY_PATH; gpu_check.sh looks in "
                "/usr/local/cuda, python's nvidia/*/lib and ldconfig\n",
                CUBLAS_VER_MAJOR);
    return 1;
  }
  if (!nccl.found) {
    std::printf("verdict: kernels only: %s; the NCCL steps skip\n",
                nccl.line.c_str());
    return 3;
  }
  std::printf("verdict: ready\n");
  return 0;
}
