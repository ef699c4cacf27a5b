// Cross-entropy loss and the AdamW step on CUDA.
//
// Cross-entropy: one block per row for the logsumexp (vocabularies are
// large), in double as on the CPU; the per-row losses then go through the
// deterministic two-pass sum. AdamW: one thread per value, in double, so a
// float parameter sees a single rounding per update as on the CPU.

#include <cmath>

#include "cuda_common.cuh"
#include "tutti/kernels/bf16_bits.hpp"

namespace tutti::kernels::cuda {
namespace {

// lse[i] and the row's loss (0 for an ignored target < 0) into row_loss[i].
template <class T>
__global__ void xent_fwd(const T* logits, const int32_t* targets, T* lse,
                         double* row_loss, int64_t vocab) {
  const int64_t i = blockIdx.x;
  const T* row = logits + i * vocab;
  double mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
    mx = fmax(mx, double(row[j]));
  mx = block_max(mx);
  double acc = 0.0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
    acc += exp(double(row[j]) - mx);
  acc = block_sum(acc);
  if (threadIdx.x == 0) {
    const double l = mx + log(acc);
    lse[i] = T(l);
    row_loss[i] = targets[i] >= 0 ? l - double(row[targets[i]]) : 0.0;
  }
}

struct array_term {
  const double* v;
  __device__ double operator()(int64_t i) const { return v[i]; }
};

template <class T>
__global__ void xent_bwd(const T* logits, const int32_t* targets,
                         int64_t first, const T* lse, T* dlogits, int64_t n,
                         int64_t vocab, double scale) {
  TUTTI_GRID_STRIDE(idx, n * vocab) {
    const int64_t i = idx / vocab, j = idx % vocab;
    const int32_t target = targets[i];
    if (target < 0) {
      dlogits[idx] = T(0);
      continue;
    }
    const double p = exp(double(logits[idx]) - double(lse[i]));
    dlogits[idx] = T(scale * (j + first == target ? p - 1.0 : p));
  }
}

struct adamw_consts {
  double lr, beta1, beta2, eps, bc1, bc2, decay, grad_scale;
};

template <class T>
__global__ void adamw_kernel(const T* param, const T* grad, const T* m,
                             const T* v, T* param_out, T* m_out, T* v_out,
                             int64_t n, adamw_consts a) {
  TUTTI_GRID_STRIDE(i, n) {
    const double g = double(grad[i]) * a.grad_scale;
    const double mi = a.beta1 * double(m[i]) + (1.0 - a.beta1) * g;
    const double vi = a.beta2 * double(v[i]) + (1.0 - a.beta2) * g * g;
    const double p = double(param[i]) * a.decay;
    m_out[i] = T(mi);
    v_out[i] = T(vi);
    param_out[i] = T(p - a.lr * (mi / a.bc1) / (sqrt(vi / a.bc2) + a.eps));
  }
}

adamw_consts adamw_consts_of(double lr, double beta1, double beta2,
                             double eps, double weight_decay, int64_t step,
                             double grad_scale) {
  return {lr,
          beta1,
          beta2,
          eps,
          1.0 - std::pow(beta1, double(step)),
          1.0 - std::pow(beta2, double(step)),
          1.0 - lr * weight_decay,
          grad_scale};
}

// The same step on moments stored as bfloat16 bits: widened exactly, the
// update in double, rounded back as the CPU rounds (bf16_bits.hpp).
__global__ void adamw_bf16_kernel(const float* param, const float* grad,
                                  const uint16_t* m, const uint16_t* v,
                                  float* param_out, uint16_t* m_out,
                                  uint16_t* v_out, int64_t n, adamw_consts a) {
  TUTTI_GRID_STRIDE(i, n) {
    const double g = double(grad[i]) * a.grad_scale;
    const double mi =
      a.beta1 * double(float_of_bf16(m[i])) + (1.0 - a.beta1) * g;
    const double vi =
      a.beta2 * double(float_of_bf16(v[i])) + (1.0 - a.beta2) * g * g;
    const double p = double(param[i]) * a.decay;
    m_out[i] = bf16_bits(float(mi));
    v_out[i] = bf16_bits(float(vi));
    param_out[i] =
      float(p - a.lr * (mi / a.bc1) / (sqrt(vi / a.bc2) + a.eps));
  }
}

} // namespace

template <class T>
double cross_entropy_forward(const stream& s, const T* logits,
                             const int32_t* targets, T* lse, int64_t n,
                             int64_t vocab) {
  if (n == 0)
    return 0.0;
  auto* row_loss = static_cast<double*>(scratch(s, sizeof(double) * n));
  xent_fwd<<<as_int(n, "cross_entropy rows"), kThreads, 0, raw(s)>>>(
    logits, targets, lse, row_loss, vocab);
  TUTTI_CUDA_LAUNCH_CHECK();
  return reduce_to_host(s, n, array_term{row_loss});
}

template <class T>
void cross_entropy_backward_slice(const stream& s, const T* logits,
                                  const int32_t* targets, int64_t first,
                                  const T* lse, T* dlogits, int64_t n,
                                  int64_t vocab, T scale) {
  if (n * vocab == 0)
    return;
  xent_bwd<<<grid_for(n * vocab), kThreads, 0, raw(s)>>>(
    logits, targets, first, lse, dlogits, n, vocab, double(scale));
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void cross_entropy_backward(const stream& s, const T* logits,
                            const int32_t* targets, const T* lse, T* dlogits,
                            int64_t n, int64_t vocab, T scale) {
  cuda::cross_entropy_backward_slice<T>(s, logits, targets, 0, lse, dlogits,
                                        n, vocab, scale);
}

// PyTorch AdamW, as on the CPU: decoupled decay on the old value, then the
// bias-corrected Adam update.
template <class T>
void adamw_step_into(const stream& s, const T* param, const T* grad, const T* m,
                     const T* v, T* param_out, T* m_out, T* v_out, int64_t n,
                     double lr, double beta1, double beta2, double eps,
                     double weight_decay, int64_t step, double grad_scale) {
  if (n == 0)
    return;
  const auto a = adamw_consts_of(lr, beta1, beta2, eps, weight_decay, step,
                                 grad_scale);
  adamw_kernel<<<grid_for(n), kThreads, 0, raw(s)>>>(
    param, grad, m, v, param_out, m_out, v_out, n, a);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void adamw_step(const stream& s, T* param, const T* grad, T* m, T* v, int64_t n,
                double lr, double beta1, double beta2, double eps,
                double weight_decay, int64_t step, double grad_scale) {
  cuda::adamw_step_into<T>(s, param, grad, m, v, param, m, v, n, lr, beta1,
                           beta2, eps, weight_decay, step, grad_scale);
}

void adamw_step_bf16_moments(const stream& s, const float* param,
                             const float* grad, const uint16_t* m,
                             const uint16_t* v, float* param_out,
                             uint16_t* m_out, uint16_t* v_out, int64_t n,
                             double lr, double beta1, double beta2, double eps,
                             double weight_decay, int64_t step,
                             double grad_scale) {
  if (n == 0)
    return;
  const auto a = adamw_consts_of(lr, beta1, beta2, eps, weight_decay, step,
                                 grad_scale);
  adamw_bf16_kernel<<<grid_for(n), kThreads, 0, raw(s)>>>(
    param, grad, m, v, param_out, m_out, v_out, n, a);
  TUTTI_CUDA_LAUNCH_CHECK();
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_LOSS_OPTIM
#include "../instantiate_ops.inc"

} // namespace tutti::kernels::cuda
