// Cross-entropy loss and the AdamW optimizer step.
//
// The loss and the per-row logsumexp are computed in double (max-subtracted)
// and returned or rounded once; AdamW does each element's arithmetic in
// double so float parameters see a single rounding per update (for float,
// the step's denominator is float: cpu_vector.cpp).

#include "backends.hpp"
#include "cpu_vector.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace tutti::kernels::cpu {

// A negative target (e.g. -100, Hugging Face's ignore_index for padding)
// marks a row that contributes no loss and gets a zero gradient.
template <class T>
double cross_entropy_forward(const stream&, const T* logits,
                             const int32_t* targets, T* lse, int64_t n,
                             int64_t vocab) {
  double loss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * vocab;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < vocab; ++j)
      mx = std::max(mx, double(row[j]));
    double acc = 0.0;
    for (int64_t j = 0; j < vocab; ++j)
      acc += std::exp(double(row[j]) - mx);
    const double l = mx + std::log(acc);
    lse[i] = T(l);
    if (targets[i] >= 0)
      loss += l - double(row[targets[i]]);
  }
  return loss;
}

template <class T>
void cross_entropy_backward_slice(const stream&, const T* logits,
                                  const int32_t* targets, int64_t first,
                                  const T* lse, T* dlogits, int64_t n,
                                  int64_t vocab, T scale) {
  for (int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * vocab;
    T* d = dlogits + i * vocab;
    if (targets[i] < 0) {
      std::fill(d, d + vocab, T(0));
      continue;
    }
    const double l = double(lse[i]), sc = double(scale);
    for (int64_t j = 0; j < vocab; ++j)
      d[j] = T(sc * std::exp(double(row[j]) - l));
    const int64_t t = targets[i] - first;
    if (t >= 0 && t < vocab)
      d[t] = T(sc * (std::exp(double(row[t]) - l) - 1.0));
  }
}

template <class T>
void cross_entropy_backward(const stream& s, const T* logits,
                            const int32_t* targets, const T* lse, T* dlogits,
                            int64_t n, int64_t vocab, T scale) {
  cpu::cross_entropy_backward_slice<T>(s, logits, targets, 0, lse, dlogits, n,
                                      vocab, scale);
}

// PyTorch AdamW: param *= 1 - lr * wd (decoupled decay on the old value),
// then param -= lr * mhat / (sqrt(vhat) + eps).
template <class T>
void adamw_step_into(const stream&, const T* param, const T* grad, const T* m,
                     const T* v, T* param_out, T* m_out, T* v_out, int64_t n,
                     double lr, double beta1, double beta2, double eps,
                     double weight_decay, int64_t step, double grad_scale) {
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  const double decay = 1.0 - lr * weight_decay;
  if constexpr (std::is_same_v<T, float>)
    return vector::adamw(param, grad, m, v, param_out, m_out, v_out, n, lr,
                         beta1, beta2, eps, decay, bc1, bc2, grad_scale);
  for (int64_t i = 0; i < n; ++i) {
    const double g = double(grad[i]) * grad_scale;
    const double mi = beta1 * double(m[i]) + (1.0 - beta1) * g;
    const double vi = beta2 * double(v[i]) + (1.0 - beta2) * g * g;
    const double p = double(param[i]) * decay;
    m_out[i] = T(mi);
    v_out[i] = T(vi);
    param_out[i] = T(p - lr * (mi / bc1) / (std::sqrt(vi / bc2) + eps));
  }
}

template <class T>
void adamw_step(const stream& s, T* param, const T* grad, T* m, T* v, int64_t n,
                double lr, double beta1, double beta2, double eps,
                double weight_decay, int64_t step, double grad_scale) {
  cpu::adamw_step_into<T>(s, param, grad, m, v, param, m, v, n, lr, beta1,
                          beta2, eps, weight_decay, step, grad_scale);
}

void adamw_step_bf16_moments(const stream& s, const float* param,
                             const float* grad, const uint16_t* m,
                             const uint16_t* v, float* param_out,
                             uint16_t* m_out, uint16_t* v_out, int64_t n,
                             double lr, double beta1, double beta2, double eps,
                             double weight_decay, int64_t step,
                             double grad_scale) {
  (void)s; // the CPU's work is synchronous
  vector::adamw_bf16_moments(param, grad, m, v, param_out, m_out, v_out, n,
                             lr, beta1, beta2, eps, 1.0 - lr * weight_decay,
                             1.0 - std::pow(beta1, double(step)),
                             1.0 - std::pow(beta2, double(step)), grad_scale);
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_LOSS_OPTIM
#include "instantiate_ops.inc"

} // namespace tutti::kernels::cpu
