#pragma once
// Where a kernel runs. The CPU backend runs inline on the calling thread and
// ignores the handle; the CUDA backend passes a cudaStream_t in `handle`.

namespace tutti::kernels {

enum class device_kind { cpu, cuda };

struct stream {
  device_kind device = device_kind::cpu;
  void* handle = nullptr;
};

inline stream cpu_stream() { return {}; }

// Makes the calling thread's BLAS single-threaded: one rank, one core, and
// results that do not depend on scheduling (DESIGN.md §8).
void use_single_threaded_blas();

} // namespace tutti::kernels
