#pragma once
// Internal: the two backends behind the public ops of ops.hpp.
//
//   tutti::kernels::cpu   the reference (OpenBLAS, deterministic); always built
//   tutti::kernels::cuda  cuBLAS + CUDA kernels; built when TUTTI_WITH_CUDA
//
// route.cpp defines the public tutti::kernels::<op> and sends each call to
// one of them by stream::device. Backend code calls its own namespace's ops
// with a qualified name (cpu::linear_forward): an unqualified call would
// also find the public op through argument-dependent lookup on `stream`.

#include <cstdint>

#include "tutti/kernels/ops.hpp"

namespace tutti::kernels::cpu {
#include "backend_ops.inc"
} // namespace tutti::kernels::cpu

#ifdef TUTTI_WITH_CUDA
namespace tutti::kernels::cuda {
#include "backend_ops.inc"
} // namespace tutti::kernels::cuda
#endif
