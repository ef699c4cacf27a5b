#pragma once
// Internal: the two backends behind the public ops of ops.hpp.
//
//   tutti::kernels::cpu   the reference (OpenBLAS, deterministic); always built
//   tutti::kernels::cuda  cuBLAS + CUDA kernels; built when TUTTI_WITH_CUDA
//
// Both declare every op of op_list.inc with the public signature, in their
// own namespace; route.cpp defines the public tutti::kernels::<op> and sends
// each call to one of them by stream::device. A backend that misses an op,
// or defines it with another signature, fails to compile or link. Backend
// code calls its own namespace's ops with a qualified name
// (cpu::linear_forward): an unqualified call would also find the public op
// through argument-dependent lookup on `stream`.

#include <cstdint>

#include "tutti/kernels/ops.hpp"

namespace tutti::kernels {

// op_signature<T>::NAME is the function type of op NAME for element type T,
// which the explicit instantiations (instantiate_ops.inc) name.
template <class T>
struct op_signature {
#define TUTTI_OP(ret, name, params, args) using name = ret params;
#define TUTTI_INDEX_OP(ret, name, params, args)
#include "tutti/kernels/op_list.inc"
};

} // namespace tutti::kernels

namespace tutti::kernels::cpu {
#define TUTTI_OP(ret, name, params, args)                                      \
  template <class T>                                                           \
  ret name params;
#define TUTTI_INDEX_OP(ret, name, params, args) ret name params;
#include "tutti/kernels/op_list.inc"
} // namespace tutti::kernels::cpu

#ifdef TUTTI_WITH_CUDA
namespace tutti::kernels::cuda {
#define TUTTI_OP(ret, name, params, args)                                      \
  template <class T>                                                           \
  ret name params;
#define TUTTI_INDEX_OP(ret, name, params, args) ret name params;
#include "tutti/kernels/op_list.inc"
} // namespace tutti::kernels::cuda
#endif
