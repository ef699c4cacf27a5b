#pragma once
// The device-agnostic kernel API. Every op the Mixtral model needs, forward
// and backward, on plain pointers and sizes. All tensors are row-major and
// contiguous. Each op is instantiated for float and double (double is what
// the finite-difference tests use). The CPU backend is deterministic: the
// same inputs give the same bits.
//
// Conventions:
//   - weight gradients ACCUMULATE (+=) into their buffers;
//   - input gradients OVERWRITE, unless the parameter says otherwise;
//   - token ids and expert indices are int32; counts and sizes are int64.
//
// Backends: every op runs where `s.device` says (route.cpp).
//   - cpu: host pointers; the reference; deterministic.
//   - cuda: every array is device memory (cudaMalloc), except that
//     grouped_linear_*'s `rows` may be host or device memory (host saves a
//     copy and a sync). Ops are asynchronous on s.handle, except those that
//     return a value (switch/z/cross-entropy loss, sum_squares,
//     apply_capacity, permute_plan): they synchronize the stream to return
//     it. Both float and double are supported. Failures throw
//     tutti::kernels::device_error (device_memory.hpp) with file:line; a
//     build without CUDA throws std::logic_error. tests/test_cuda_kernels
//     holds them to the cpu results (fp32: 1e-5 relative; integer outputs
//     identical) and to bitwise repeatability (fixed reduction orders, no
//     float atomics). Drive a stream from one thread at a time: each
//     stream has its own scratch memory.
//   - s.gemm = gemm_precision::bf16 switches the float GEMMs of linear_* and
//     grouped_linear_* to bf16 inputs with fp32 accumulation: cuBLAS on
//     cuda, oneDNN on a CPU with bf16 units (cpu_bf16_support()).

#include <cstdint>

#include "tutti/kernels/stream.hpp"

namespace tutti::kernels {

// The routed ops are declared from the list in op_list.inc, which holds each
// op's signature and documentation (look an op up there by name). A
// TUTTI_OP entry declares
//   template <class T> RETURN NAME(PARAMETERS);
// instantiated for float and double; a TUTTI_INDEX_OP entry (no element
// type) declares the plain function RETURN NAME(PARAMETERS).
#define TUTTI_OP(ret, name, params, args)                                      \
  template <class T>                                                           \
  ret name params;
#define TUTTI_INDEX_OP(ret, name, params, args) ret name params;
#include "tutti/kernels/op_list.inc"

// Expert capacity C = ceil(capacity_factor * tokens * k / experts);
// capacity_factor <= 0 means dropless (returns INT64_MAX). Arithmetic on
// sizes, the same for every backend: not routed, no stream.
int64_t expert_capacity(double capacity_factor, int64_t tokens, int64_t k,
                        int64_t experts);

// Which attention ops a model runs on `device` for sequences of `seq`
// tokens: the tiled ones (attention_*_tiled: a row's log-sum-exp kept for
// backward) on CUDA, and on the CPU above kAttentionTiledAbove tokens;
// attention_forward / attention_backward ([seq, seq] probabilities kept)
// for the CPU's shorter sequences, where they are faster and give the bits
// CPU training has always had. Not routed, no stream.
constexpr int64_t kAttentionTiledAbove = 512;
constexpr bool attention_is_tiled(device_kind device, int64_t seq) {
  return device == device_kind::cuda || seq > kAttentionTiledAbove;
}

// Elements attention keeps for backward per sequence and query head.
constexpr int64_t attention_saved_per_head(device_kind device, int64_t seq) {
  return attention_is_tiled(device, seq) ? seq : seq * seq;
}

} // namespace tutti::kernels
