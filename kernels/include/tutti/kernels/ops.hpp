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
//     grouped_linear_* on cuda to bf16 inputs with fp32 accumulation.

#include <cstdint>

#include "tutti/kernels/stream.hpp"

namespace tutti::kernels {

// -- linear algebra -----------------------------------------------------------

// y[m,n] = x[m,k] * w[n,k]^T
template <class T>
void linear_forward(const stream& s, const T* x, const T* w, T* y, int64_t m,
                    int64_t k, int64_t n);

// dx[m,k] = dy[m,n] * w[n,k] (dx may be null: not needed);
// dw[n,k] += dy^T * x
template <class T>
void linear_backward(const stream& s, const T* x, const T* w, const T* dy,
                     T* dx, T* dw, int64_t m, int64_t k, int64_t n);

// Grouped linear over G groups of rows (the experts of one shard): rows
// [offset_g, offset_g + rows[g]) of x go through w[g] ([n,k] each).
template <class T>
void grouped_linear_forward(const stream& s, const T* x, const T* w,
                            const int64_t* rows, int64_t groups, T* y,
                            int64_t k, int64_t n);

template <class T>
void grouped_linear_backward(const stream& s, const T* x, const T* w,
                             const T* dy, const int64_t* rows, int64_t groups,
                             T* dx, T* dw, int64_t k, int64_t n);

// -- embedding ------------------------------------------------------------------

// out[i,:] = table[ids[i],:]
template <class T>
void embedding_forward(const stream& s, const int32_t* ids, const T* table,
                       T* out, int64_t n, int64_t dim);

// dtable[ids[i],:] += dout[i,:]
template <class T>
void embedding_backward(const stream& s, const int32_t* ids, const T* dout,
                        T* dtable, int64_t n, int64_t dim);

// -- RMSNorm ----------------------------------------------------------------------

// y = x / sqrt(mean(x^2) + eps) * w; rstd[i] saved for backward.
template <class T>
void rmsnorm_forward(const stream& s, const T* x, const T* w, T* y, T* rstd,
                     int64_t n, int64_t dim, T eps);

// dx overwritten, dw += .
template <class T>
void rmsnorm_backward(const stream& s, const T* x, const T* w, const T* rstd,
                      const T* dy, T* dx, T* dw, int64_t n, int64_t dim);

// -- rotary position embedding -------------------------------------------------

// In place on x[batch, seq, heads, head_dim], the "rotate_half" convention of
// Hugging Face's Llama/Mixtral: pairs (i, i + head_dim/2), position = seq index,
// inv_freq[i] = theta^(-2i/head_dim).
template <class T>
void rope_forward(const stream& s, T* x, int64_t batch, int64_t seq,
                  int64_t heads, int64_t head_dim, double theta);

// In place: the inverse rotation applied to the gradient.
template <class T>
void rope_backward(const stream& s, T* dx, int64_t batch, int64_t seq,
                   int64_t heads, int64_t head_dim, double theta);

// -- causal grouped-query attention ------------------------------------------

// q[b,s,hq,d], k/v[b,s,hkv,d] -> out[b,s,hq,d]; probs[b,hq,s,s] saved
// (softmax of q.k/sqrt(d), causal). hq % hkv == 0; query head h reads kv
// head h / (hq/hkv).
template <class T>
void attention_forward(const stream& s, const T* q, const T* k, const T* v,
                       T* out, T* probs, int64_t batch, int64_t seq,
                       int64_t q_heads, int64_t kv_heads, int64_t head_dim);

// dq, dk, dv overwritten.
template <class T>
void attention_backward(const stream& s, const T* q, const T* k, const T* v,
                        const T* probs, const T* dout, T* dq, T* dk, T* dv,
                        int64_t batch, int64_t seq, int64_t q_heads,
                        int64_t kv_heads, int64_t head_dim);

// -- SwiGLU -----------------------------------------------------------------------

// h = silu(gate) * up, elementwise over n values.
template <class T>
void swiglu_forward(const stream& s, const T* gate, const T* up, T* h,
                    int64_t n);

template <class T>
void swiglu_backward(const stream& s, const T* gate, const T* up, const T* dh,
                     T* dgate, T* dup, int64_t n);

// -- router -------------------------------------------------------------------------

// For each token: choose the top-k experts by (logits + bias) (bias may be
// null; it changes selection only), then gate = softmax over the chosen
// logits / temperature. probs[n,e] = softmax(logits / temperature) over all
// experts (the P_i of the Switch loss). Ties break towards the lower index.
template <class T>
void router_topk_forward(const stream& s, const T* logits, const T* bias,
                         int32_t* topk_idx, T* topk_gate, T* probs, int64_t n,
                         int64_t experts, int64_t k, T temperature);

// dlogits[n,e] overwritten from dgate[n,k] (through the softmax over the
// chosen logits only).
template <class T>
void router_topk_backward(const stream& s, const int32_t* topk_idx,
                          const T* topk_gate, const T* dgate, T* dlogits,
                          int64_t n, int64_t experts, int64_t k, T temperature);

// Switch load-balancing loss, L = coeff * E * sum_i f_i * P_i, with
// f_i = global_count_i / (T_global * k) given by the caller (global over the
// batch) and P_i = (1/T_global) * sum_x p_i(x). Returns this shard's share of
// L (sum over its tokens); the shares add up to L across ranks.
template <class T>
double switch_loss_forward(const stream& s, const T* probs, const T* fraction,
                           int64_t n, int64_t experts, double coeff,
                           int64_t global_tokens);

// dlogits += dL/dlogits through probs = softmax(logits / temperature).
template <class T>
void switch_loss_backward(const stream& s, const T* probs, const T* fraction,
                          T* dlogits, int64_t n, int64_t experts, double coeff,
                          int64_t global_tokens, T temperature);

// Router z-loss, L_z = coeff * (1/T_global) * sum_x logsumexp(logits_x)^2.
// Returns this shard's share.
template <class T>
double z_loss_forward(const stream& s, const T* logits, int64_t n,
                      int64_t experts, double coeff, int64_t global_tokens);

// dlogits += dL_z/dlogits.
template <class T>
void z_loss_backward(const stream& s, const T* logits, T* dlogits, int64_t n,
                     int64_t experts, double coeff, int64_t global_tokens);

// Expert capacity C = ceil(capacity_factor * tokens * k / experts);
// capacity_factor <= 0 means dropless (returns INT64_MAX).
int64_t expert_capacity(double capacity_factor, int64_t tokens, int64_t k,
                        int64_t experts);

// Drops the (token, slot) assignments over each expert's capacity, keeping
// the highest gates (ties: lower token index first). Dropped slots get
// topk_idx = -1. counts[e] receives the kept count per expert. Returns the
// number of dropped assignments.
template <class T>
int64_t apply_capacity(const stream& s, int32_t* topk_idx, const T* topk_gate,
                       int64_t* counts, int64_t n, int64_t experts, int64_t k,
                       int64_t capacity);

// DeepSeek-V3 bias balancing: bias_i += rate * sign(mean(counts) - counts_i).
template <class T>
void bias_update(const stream& s, T* bias, const int64_t* global_counts,
                 int64_t experts, double rate);

// -- dispatch / combine (permute / unpermute) --------------------------------

// Dispatch order: the kept (token, slot) assignments sorted stably by expert.
// slot_of_row[r] = token * k + slot for each routed row r; counts[e] rows per
// expert. Returns the number of routed rows.
int64_t permute_plan(const stream& s, const int32_t* topk_idx, int64_t n,
                     int64_t experts, int64_t k, int32_t* slot_of_row,
                     int64_t* counts);

// out[r,:] = x[slot_of_row[r] / k, :]
template <class T>
void permute_rows(const stream& s, const T* x, const int32_t* slot_of_row,
                  T* out, int64_t rows, int64_t k, int64_t dim);

// dx[t,:] += sum of drows over the rows of token t (dx is not cleared).
template <class T>
void permute_rows_backward(const stream& s, const T* drows,
                           const int32_t* slot_of_row, T* dx, int64_t rows,
                           int64_t k, int64_t dim);

// out[t,:] = sum over rows r of token t: gate[slot_of_row[r]] * y[r,:];
// out is overwritten (tokens with no routed row get zeros).
template <class T>
void unpermute_combine(const stream& s, const T* y, const int32_t* slot_of_row,
                       const T* topk_gate, T* out, int64_t rows, int64_t n,
                       int64_t k, int64_t dim);

// dy[r,:] = gate * dout[t,:]; dgate[slot] = dot(dout[t,:], y[r,:]); dgate is
// overwritten for all n*k slots (dropped slots get 0).
template <class T>
void unpermute_combine_backward(const stream& s, const T* dout, const T* y,
                                const int32_t* slot_of_row, const T* topk_gate,
                                T* dy, T* dgate, int64_t rows, int64_t n,
                                int64_t k, int64_t dim);

// dst[i,:] = src[index[i],:]  (used to regroup rows between layouts)
template <class T>
void gather_rows(const stream& s, const T* src, const int64_t* index, T* dst,
                 int64_t rows, int64_t dim);

// dst[index[i],:] = src[i,:]
template <class T>
void scatter_rows(const stream& s, const T* src, const int64_t* index, T* dst,
                  int64_t rows, int64_t dim);

// -- loss -----------------------------------------------------------------------------

// Returns sum over rows of -log softmax(logits)[target]; lse[i] saved.
template <class T>
double cross_entropy_forward(const stream& s, const T* logits,
                             const int32_t* targets, T* lse, int64_t n,
                             int64_t vocab);

// dlogits = scale * (softmax(logits) - onehot(target)), overwritten.
template <class T>
void cross_entropy_backward(const stream& s, const T* logits,
                            const int32_t* targets, const T* lse, T* dlogits,
                            int64_t n, int64_t vocab, T scale);

// -- optimizer and reductions ----------------------------------------------

// One AdamW step (decoupled weight decay) on n values. grad is multiplied by
// grad_scale first (gradient clipping); step is 1-based for bias correction.
template <class T>
void adamw_step(const stream& s, T* param, const T* grad, T* m, T* v,
                int64_t n, double lr, double beta1, double beta2, double eps,
                double weight_decay, int64_t step, double grad_scale);

// sum of x^2, accumulated in double.
template <class T>
double sum_squares(const stream& s, const T* x, int64_t n);

// y += a * x
template <class T>
void axpy(const stream& s, T a, const T* x, T* y, int64_t n);

// x = 0
template <class T>
void fill_zero(const stream& s, T* x, int64_t n);

} // namespace tutti::kernels
