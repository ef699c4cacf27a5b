// The public ops of ops.hpp: each one sends the call to the backend named by
// stream::device. The backends (backends.hpp) have the same signatures in
// their own namespaces; this file holds no arithmetic.
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

#ifdef TUTTI_WITH_CUDA
#define TUTTI_CUDA_BRANCH(op, ...) return cuda::op(__VA_ARGS__)
#else
#define TUTTI_CUDA_BRANCH(op, ...) no_cuda(#op)
#endif

// `return f(...)` is fine for void f too, so one macro serves every op.
#define TUTTI_ROUTE(op, ...)                                                   \
  switch (s.device) {                                                          \
  case device_kind::cpu:                                                       \
    return cpu::op(__VA_ARGS__);                                               \
  case device_kind::cuda:                                                      \
    TUTTI_CUDA_BRANCH(op, __VA_ARGS__);                                        \
  }                                                                            \
  bad_device(#op)

// -- linear algebra -------------------------------------------------------------

template <class T>
void linear_forward(const stream& s, const T* x, const T* w, T* y, int64_t m,
                    int64_t k, int64_t n) {
  TUTTI_ROUTE(linear_forward, s, x, w, y, m, k, n);
}

template <class T>
void linear_backward(const stream& s, const T* x, const T* w, const T* dy,
                     T* dx, T* dw, int64_t m, int64_t k, int64_t n) {
  TUTTI_ROUTE(linear_backward, s, x, w, dy, dx, dw, m, k, n);
}

template <class T>
void grouped_linear_forward(const stream& s, const T* x, const T* w,
                            const int64_t* rows, int64_t groups, T* y,
                            int64_t k, int64_t n) {
  TUTTI_ROUTE(grouped_linear_forward, s, x, w, rows, groups, y, k, n);
}

template <class T>
void grouped_linear_backward(const stream& s, const T* x, const T* w,
                             const T* dy, const int64_t* rows, int64_t groups,
                             T* dx, T* dw, int64_t k, int64_t n) {
  TUTTI_ROUTE(grouped_linear_backward, s, x, w, dy, rows, groups, dx, dw, k,
              n);
}

// -- embedding, RMSNorm, RoPE --------------------------------------------------

template <class T>
void embedding_forward(const stream& s, const int32_t* ids, const T* table,
                       T* out, int64_t n, int64_t dim) {
  TUTTI_ROUTE(embedding_forward, s, ids, table, out, n, dim);
}

template <class T>
void embedding_backward(const stream& s, const int32_t* ids, const T* dout,
                        T* dtable, int64_t n, int64_t dim) {
  TUTTI_ROUTE(embedding_backward, s, ids, dout, dtable, n, dim);
}

template <class T>
void rmsnorm_forward(const stream& s, const T* x, const T* w, T* y, T* rstd,
                     int64_t n, int64_t dim, T eps) {
  TUTTI_ROUTE(rmsnorm_forward, s, x, w, y, rstd, n, dim, eps);
}

template <class T>
void rmsnorm_backward(const stream& s, const T* x, const T* w, const T* rstd,
                      const T* dy, T* dx, T* dw, int64_t n, int64_t dim) {
  TUTTI_ROUTE(rmsnorm_backward, s, x, w, rstd, dy, dx, dw, n, dim);
}

template <class T>
void rope_forward(const stream& s, T* x, int64_t batch, int64_t seq,
                  int64_t heads, int64_t head_dim, double theta) {
  TUTTI_ROUTE(rope_forward, s, x, batch, seq, heads, head_dim, theta);
}

template <class T>
void rope_backward(const stream& s, T* dx, int64_t batch, int64_t seq,
                   int64_t heads, int64_t head_dim, double theta) {
  TUTTI_ROUTE(rope_backward, s, dx, batch, seq, heads, head_dim, theta);
}

// -- attention, SwiGLU -----------------------------------------------------------

template <class T>
void attention_forward(const stream& s, const T* q, const T* k, const T* v,
                       T* out, T* probs, int64_t batch, int64_t seq,
                       int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  TUTTI_ROUTE(attention_forward, s, q, k, v, out, probs, batch, seq, q_heads,
              kv_heads, head_dim);
}

template <class T>
void attention_backward(const stream& s, const T* q, const T* k, const T* v,
                        const T* probs, const T* dout, T* dq, T* dk, T* dv,
                        int64_t batch, int64_t seq, int64_t q_heads,
                        int64_t kv_heads, int64_t head_dim) {
  TUTTI_ROUTE(attention_backward, s, q, k, v, probs, dout, dq, dk, dv, batch,
              seq, q_heads, kv_heads, head_dim);
}

template <class T>
void swiglu_forward(const stream& s, const T* gate, const T* up, T* h,
                    int64_t n) {
  TUTTI_ROUTE(swiglu_forward, s, gate, up, h, n);
}

template <class T>
void swiglu_backward(const stream& s, const T* gate, const T* up, const T* dh,
                     T* dgate, T* dup, int64_t n) {
  TUTTI_ROUTE(swiglu_backward, s, gate, up, dh, dgate, dup, n);
}

// -- router ----------------------------------------------------------------------

template <class T>
void router_topk_forward(const stream& s, const T* logits, const T* bias,
                         int32_t* topk_idx, T* topk_gate, T* probs, int64_t n,
                         int64_t experts, int64_t k, T temperature) {
  TUTTI_ROUTE(router_topk_forward, s, logits, bias, topk_idx, topk_gate, probs,
              n, experts, k, temperature);
}

template <class T>
void router_topk_backward(const stream& s, const int32_t* topk_idx,
                          const T* topk_gate, const T* dgate, T* dlogits,
                          int64_t n, int64_t experts, int64_t k,
                          T temperature) {
  TUTTI_ROUTE(router_topk_backward, s, topk_idx, topk_gate, dgate, dlogits, n,
              experts, k, temperature);
}

template <class T>
double switch_loss_forward(const stream& s, const T* probs, const T* fraction,
                           int64_t n, int64_t experts, double coeff,
                           int64_t global_tokens) {
  TUTTI_ROUTE(switch_loss_forward, s, probs, fraction, n, experts, coeff,
              global_tokens);
}

template <class T>
void switch_loss_backward(const stream& s, const T* probs, const T* fraction,
                          T* dlogits, int64_t n, int64_t experts, double coeff,
                          int64_t global_tokens, T temperature) {
  TUTTI_ROUTE(switch_loss_backward, s, probs, fraction, dlogits, n, experts,
              coeff, global_tokens, temperature);
}

template <class T>
double z_loss_forward(const stream& s, const T* logits, int64_t n,
                      int64_t experts, double coeff, int64_t global_tokens) {
  TUTTI_ROUTE(z_loss_forward, s, logits, n, experts, coeff, global_tokens);
}

template <class T>
void z_loss_backward(const stream& s, const T* logits, T* dlogits, int64_t n,
                     int64_t experts, double coeff, int64_t global_tokens) {
  TUTTI_ROUTE(z_loss_backward, s, logits, dlogits, n, experts, coeff,
              global_tokens);
}

template <class T>
int64_t apply_capacity(const stream& s, int32_t* topk_idx, const T* topk_gate,
                       int64_t* counts, int64_t n, int64_t experts, int64_t k,
                       int64_t capacity) {
  TUTTI_ROUTE(apply_capacity, s, topk_idx, topk_gate, counts, n, experts, k,
              capacity);
}

template <class T>
void bias_update(const stream& s, T* bias, const int64_t* global_counts,
                 int64_t experts, double rate) {
  TUTTI_ROUTE(bias_update, s, bias, global_counts, experts, rate);
}

// -- dispatch / combine ------------------------------------------------------------

int64_t permute_plan(const stream& s, const int32_t* topk_idx, int64_t n,
                     int64_t experts, int64_t k, int32_t* slot_of_row,
                     int64_t* counts) {
  TUTTI_ROUTE(permute_plan, s, topk_idx, n, experts, k, slot_of_row, counts);
}

template <class T>
void permute_rows(const stream& s, const T* x, const int32_t* slot_of_row,
                  T* out, int64_t rows, int64_t k, int64_t dim) {
  TUTTI_ROUTE(permute_rows, s, x, slot_of_row, out, rows, k, dim);
}

template <class T>
void permute_rows_backward(const stream& s, const T* drows,
                           const int32_t* slot_of_row, T* dx, int64_t rows,
                           int64_t k, int64_t dim) {
  TUTTI_ROUTE(permute_rows_backward, s, drows, slot_of_row, dx, rows, k, dim);
}

template <class T>
void unpermute_combine(const stream& s, const T* y, const int32_t* slot_of_row,
                       const T* topk_gate, T* out, int64_t rows, int64_t n,
                       int64_t k, int64_t dim) {
  TUTTI_ROUTE(unpermute_combine, s, y, slot_of_row, topk_gate, out, rows, n, k,
              dim);
}

template <class T>
void unpermute_combine_backward(const stream& s, const T* dout, const T* y,
                                const int32_t* slot_of_row, const T* topk_gate,
                                T* dy, T* dgate, int64_t rows, int64_t n,
                                int64_t k, int64_t dim) {
  TUTTI_ROUTE(unpermute_combine_backward, s, dout, y, slot_of_row, topk_gate,
              dy, dgate, rows, n, k, dim);
}

template <class T>
void gather_rows(const stream& s, const T* src, const int64_t* index, T* dst,
                 int64_t rows, int64_t dim) {
  TUTTI_ROUTE(gather_rows, s, src, index, dst, rows, dim);
}

template <class T>
void scatter_rows(const stream& s, const T* src, const int64_t* index, T* dst,
                  int64_t rows, int64_t dim) {
  TUTTI_ROUTE(scatter_rows, s, src, index, dst, rows, dim);
}

// -- loss, optimizer, reductions ------------------------------------------------

template <class T>
double cross_entropy_forward(const stream& s, const T* logits,
                             const int32_t* targets, T* lse, int64_t n,
                             int64_t vocab) {
  TUTTI_ROUTE(cross_entropy_forward, s, logits, targets, lse, n, vocab);
}

template <class T>
void cross_entropy_backward(const stream& s, const T* logits,
                            const int32_t* targets, const T* lse, T* dlogits,
                            int64_t n, int64_t vocab, T scale) {
  TUTTI_ROUTE(cross_entropy_backward, s, logits, targets, lse, dlogits, n,
              vocab, scale);
}

template <class T>
void adamw_step(const stream& s, T* param, const T* grad, T* m, T* v,
                int64_t n, double lr, double beta1, double beta2, double eps,
                double weight_decay, int64_t step, double grad_scale) {
  TUTTI_ROUTE(adamw_step, s, param, grad, m, v, n, lr, beta1, beta2, eps,
              weight_decay, step, grad_scale);
}

template <class T>
double sum_squares(const stream& s, const T* x, int64_t n) {
  TUTTI_ROUTE(sum_squares, s, x, n);
}

template <class T>
void axpy(const stream& s, T a, const T* x, T* y, int64_t n) {
  TUTTI_ROUTE(axpy, s, a, x, y, n);
}

template <class T>
void fill_zero(const stream& s, T* x, int64_t n) {
  TUTTI_ROUTE(fill_zero, s, x, n);
}

#undef TUTTI_ROUTE
#undef TUTTI_CUDA_BRANCH

#define TUTTI_INSTANTIATE(T)                                                   \
  template void linear_forward<T>(const stream&, const T*, const T*, T*,       \
                                  int64_t, int64_t, int64_t);                  \
  template void linear_backward<T>(const stream&, const T*, const T*,          \
                                   const T*, T*, T*, int64_t, int64_t,         \
                                   int64_t);                                   \
  template void grouped_linear_forward<T>(const stream&, const T*, const T*,   \
                                          const int64_t*, int64_t, T*,         \
                                          int64_t, int64_t);                   \
  template void grouped_linear_backward<T>(                                    \
      const stream&, const T*, const T*, const T*, const int64_t*, int64_t,    \
      T*, T*, int64_t, int64_t);                                               \
  template void embedding_forward<T>(const stream&, const int32_t*, const T*,  \
                                     T*, int64_t, int64_t);                    \
  template void embedding_backward<T>(const stream&, const int32_t*,           \
                                      const T*, T*, int64_t, int64_t);         \
  template void rmsnorm_forward<T>(const stream&, const T*, const T*, T*, T*,  \
                                   int64_t, int64_t, T);                       \
  template void rmsnorm_backward<T>(const stream&, const T*, const T*,         \
                                    const T*, const T*, T*, T*, int64_t,       \
                                    int64_t);                                  \
  template void rope_forward<T>(const stream&, T*, int64_t, int64_t, int64_t,  \
                                int64_t, double);                              \
  template void rope_backward<T>(const stream&, T*, int64_t, int64_t,          \
                                 int64_t, int64_t, double);                    \
  template void attention_forward<T>(const stream&, const T*, const T*,        \
                                     const T*, T*, T*, int64_t, int64_t,       \
                                     int64_t, int64_t, int64_t);               \
  template void attention_backward<T>(                                         \
      const stream&, const T*, const T*, const T*, const T*, const T*, T*,     \
      T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t);                    \
  template void swiglu_forward<T>(const stream&, const T*, const T*, T*,       \
                                  int64_t);                                    \
  template void swiglu_backward<T>(const stream&, const T*, const T*,          \
                                   const T*, T*, T*, int64_t);                 \
  template void router_topk_forward<T>(const stream&, const T*, const T*,      \
                                       int32_t*, T*, T*, int64_t, int64_t,     \
                                       int64_t, T);                            \
  template void router_topk_backward<T>(const stream&, const int32_t*,         \
                                        const T*, const T*, T*, int64_t,       \
                                        int64_t, int64_t, T);                  \
  template double switch_loss_forward<T>(const stream&, const T*, const T*,    \
                                         int64_t, int64_t, double, int64_t);   \
  template void switch_loss_backward<T>(const stream&, const T*, const T*,     \
                                        T*, int64_t, int64_t, double, int64_t, \
                                        T);                                    \
  template double z_loss_forward<T>(const stream&, const T*, int64_t, int64_t, \
                                    double, int64_t);                          \
  template void z_loss_backward<T>(const stream&, const T*, T*, int64_t,       \
                                   int64_t, double, int64_t);                  \
  template int64_t apply_capacity<T>(const stream&, int32_t*, const T*,        \
                                     int64_t*, int64_t, int64_t, int64_t,      \
                                     int64_t);                                 \
  template void bias_update<T>(const stream&, T*, const int64_t*, int64_t,     \
                               double);                                        \
  template void permute_rows<T>(const stream&, const T*, const int32_t*, T*,   \
                                int64_t, int64_t, int64_t);                    \
  template void permute_rows_backward<T>(const stream&, const T*,              \
                                         const int32_t*, T*, int64_t, int64_t, \
                                         int64_t);                             \
  template void unpermute_combine<T>(const stream&, const T*, const int32_t*,  \
                                     const T*, T*, int64_t, int64_t, int64_t,  \
                                     int64_t);                                 \
  template void unpermute_combine_backward<T>(                                 \
      const stream&, const T*, const T*, const int32_t*, const T*, T*, T*,     \
      int64_t, int64_t, int64_t, int64_t);                                     \
  template void gather_rows<T>(const stream&, const T*, const int64_t*, T*,    \
                               int64_t, int64_t);                              \
  template void scatter_rows<T>(const stream&, const T*, const int64_t*, T*,   \
                                int64_t, int64_t);                             \
  template double cross_entropy_forward<T>(const stream&, const T*,            \
                                           const int32_t*, T*, int64_t,        \
                                           int64_t);                           \
  template void cross_entropy_backward<T>(const stream&, const T*,             \
                                          const int32_t*, const T*, T*,        \
                                          int64_t, int64_t, T);                \
  template void adamw_step<T>(const stream&, T*, const T*, T*, T*, int64_t,    \
                              double, double, double, double, double, int64_t, \
                              double);                                         \
  template double sum_squares<T>(const stream&, const T*, int64_t);            \
  template void axpy<T>(const stream&, T, const T*, T*, int64_t);              \
  template void fill_zero<T>(const stream&, T*, int64_t);

TUTTI_INSTANTIATE(float)
TUTTI_INSTANTIATE(double)
#undef TUTTI_INSTANTIATE

} // namespace tutti::kernels
