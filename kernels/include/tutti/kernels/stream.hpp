#pragma once
// Where a kernel runs. The CPU backend runs inline on the calling thread and
// ignores the handle; the CUDA backend passes a cudaStream_t in `handle`
// (nullptr: the legacy default stream) and runs on the calling thread's
// current device (cudaSetDevice).

namespace tutti::kernels {

enum class device_kind { cpu, cuda };

// Input precision of the GEMMs in linear_* and grouped_linear_* with
// T = float. fp32 is the reference. bf16 rounds the GEMM inputs to bfloat16
// and accumulates and writes in fp32: weights stay fp32 masters, gradients
// are fp32. On the CPU bf16 runs where oneDNN finds bf16 units
// (cpu_bf16_support()) and is fp32 elsewhere; T = double ignores it.
enum class gemm_precision { fp32, bf16 };

struct stream {
  device_kind device = device_kind::cpu;
  void* handle = nullptr;
  gemm_precision gemm = gemm_precision::fp32;
};

inline stream cpu_stream() { return {}; }

// A CUDA stream as a kernel stream; `cuda_stream_handle` is a cudaStream_t.
inline stream cuda_stream(void* cuda_stream_handle,
                          gemm_precision gemm = gemm_precision::fp32) {
  return {device_kind::cuda, cuda_stream_handle, gemm};
}

// Whether the CPU backend runs gemm_precision::bf16 here (oneDNN on AMX or
// AVX512-BF16; ONEDNN_MAX_CPU_ISA caps what oneDNN may use), and the
// instruction set oneDNN found ("avx512_core_amx", "avx512_core_bf16",
// "avx512_core", "avx2").
struct cpu_bf16_status {
  bool runs_bf16 = false;
  const char* isa = "";
};
cpu_bf16_status cpu_bf16_support();

// Makes the calling thread's BLAS single-threaded: one rank, one core, and
// results that do not depend on scheduling.
void use_single_threaded_blas();

} // namespace tutti::kernels
