// The public ops of ops.hpp: each one sends the call to the backend named by
// stream::device. Generated from op_list.inc; the backends (backends.hpp)
// have the same signatures in their own namespaces. This file holds no
// arithmetic.
//
// Built without CUDA, a cuda stream is a programming error at this boundary
// (nothing on the host can have made device pointers), so it throws
// std::logic_error rather than returning a status the API has no room for.

#include <stdexcept>
#include <string>

#include "backends.hpp"

namespace tutti::kernels {
namespace {

#ifndef TUTTI_WITH_CUDA
[[noreturn]] void no_cuda(const char* op) {
  throw std::logic_error(std::string("tutti built without CUDA: ") + op
                         + " was called on a cuda stream");
}
#endif

[[noreturn]] void bad_device(const char* op) {
  throw std::invalid_argument(std::string("tutti kernels: ") + op
                              + ": unknown stream device kind");
}

} // namespace

// `callee` is the backend op with its template arguments (if any), `args`
// the parenthesized arguments. `return f(...)` is fine for void f too, so
// one macro serves every op.
#ifdef TUTTI_WITH_CUDA
#define TUTTI_CUDA_BRANCH(name, callee, args) return cuda::callee args
#else
#define TUTTI_CUDA_BRANCH(name, callee, args) no_cuda(#name)
#endif

#define TUTTI_ROUTE(name, callee, args)                                        \
  switch (s.device) {                                                          \
  case device_kind::cpu:                                                       \
    return cpu::callee args;                                                   \
  case device_kind::cuda:                                                      \
    TUTTI_CUDA_BRANCH(name, callee, args);                                     \
  }                                                                            \
  bad_device(#name)

#define TUTTI_OP(ret, name, params, args)                                      \
  template <class T>                                                           \
  ret name params {                                                            \
    TUTTI_ROUTE(name, name<T>, args);                                          \
  }
#define TUTTI_INDEX_OP(ret, name, params, args)                                \
  ret name params { TUTTI_ROUTE(name, name, args); }
#include "tutti/kernels/op_list.inc"

#undef TUTTI_ROUTE
#undef TUTTI_CUDA_BRANCH

#include "instantiate_ops.inc"

} // namespace tutti::kernels
