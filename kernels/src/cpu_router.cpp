// MoE router: top-k selection and gates, the auxiliary losses (Switch
// load balancing, z-loss), expert capacity and DeepSeek-V3 bias balancing.
//
// Softmaxes subtract the row max and sum in double. Every loop runs in a
// fixed order, and ties are broken by index, so the routing decision is a
// pure function of the inputs.

#include "backends.hpp"
#include "host_device.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tutti::kernels::cpu {

namespace {

// out[j] = softmax(x[j] * inv_t) over a row of length len, in double.
template <class T>
void softmax_row(const T* x, int64_t len, double inv_t, double* out) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < len; ++j)
    mx = std::max(mx, double(x[j]) * inv_t);
  double denom = 0.0;
  for (int64_t j = 0; j < len; ++j) {
    out[j] = std::exp(double(x[j]) * inv_t - mx);
    denom += out[j];
  }
  for (int64_t j = 0; j < len; ++j)
    out[j] /= denom;
}

// logsumexp of one row, max-subtracted.
template <class T>
double logsumexp_row(const T* x, int64_t len) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < len; ++j)
    mx = std::max(mx, double(x[j]));
  double acc = 0.0;
  for (int64_t j = 0; j < len; ++j)
    acc += std::exp(double(x[j]) - mx);
  return mx + std::log(acc);
}

} // namespace

// -- top-k routing --------------------------------------------------------------

// Requires k <= experts. topk_idx lists each token's experts best-first (by
// biased score); probs may be null when the Switch loss is off.

template <class T>
void router_topk_forward(const stream&, const T* logits, const T* bias,
                         int32_t* topk_idx, T* topk_gate, T* probs, int64_t n,
                         int64_t experts, int64_t k, T temperature) {
  const double inv_t = 1.0 / double(temperature);
  std::vector<char> taken(experts);
  std::vector<double> chosen(k), gate(k), all(experts);
  for (int64_t t = 0; t < n; ++t) {
    const T* row = logits + t * experts;
    // k passes of argmax: k is tiny, and the strict '>' in index order makes
    // ties go to the lower expert index. Slots come out best-first.
    std::fill(taken.begin(), taken.end(), 0);
    for (int64_t slot = 0; slot < k; ++slot) {
      int64_t best = -1;
      double best_score = 0.0;
      for (int64_t e = 0; e < experts; ++e) {
        if (taken[e])
          continue;
        const double sc = double(row[e]) + (bias ? double(bias[e]) : 0.0);
        if (best < 0 || sc > best_score)
          best = e, best_score = sc;
      }
      taken[best] = 1;
      topk_idx[t * k + slot] = static_cast<int32_t>(best);
      chosen[slot] = double(row[best]); // the raw logit: bias is not a gate
    }
    softmax_row(chosen.data(), k, inv_t, gate.data());
    for (int64_t slot = 0; slot < k; ++slot)
      topk_gate[t * k + slot] = T(gate[slot]);
    if (probs != nullptr) {
      softmax_row(row, experts, inv_t, all.data());
      for (int64_t e = 0; e < experts; ++e)
        probs[t * experts + e] = T(all[e]);
    }
  }
}

// Softmax Jacobian over the chosen logits only:
//   dlogit[idx_j] = (1/T) * gate_j * (dgate_j - sum_i gate_i dgate_i).
// Expects valid indices (>= 0): pass the pre-capacity topk_idx, since a
// dropped slot's gate still took part in the softmax.
template <class T>
void router_topk_backward(const stream&, const int32_t* topk_idx,
                          const T* topk_gate, const T* dgate, T* dlogits,
                          int64_t n, int64_t experts, int64_t k,
                          T temperature) {
  const double inv_t = 1.0 / double(temperature);
  for (int64_t t = 0; t < n; ++t) {
    const T* g = topk_gate + t * k;
    const T* dg = dgate + t * k;
    T* out = dlogits + t * experts;
    std::fill(out, out + experts, T(0));
    double dot = 0.0;
    for (int64_t j = 0; j < k; ++j)
      dot += double(g[j]) * double(dg[j]);
    for (int64_t j = 0; j < k; ++j)
      out[topk_idx[t * k + j]] = T(inv_t * double(g[j])
                                   * (double(dg[j]) - dot));
  }
}

template <class T>
void router_gates_from_probs(const stream&, const int32_t* topk_idx,
                             const T* probs, T* topk_gate, int64_t n,
                             int64_t experts, int64_t k) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j)
      topk_gate[t * k + j] = probs[t * experts + topk_idx[t * k + j]];
}

template <class T>
void router_gates_from_probs_backward(const stream&, const int32_t* topk_idx,
                                      const T* probs, const T* dgate,
                                      T* dlogits, int64_t n, int64_t experts,
                                      int64_t k, T temperature) {
  const double inv_t = 1.0 / double(temperature);
  for (int64_t t = 0; t < n; ++t)
    detail::gates_from_probs_backward_row(topk_idx + t * k, probs + t * experts,
                                          dgate + t * k, dlogits + t * experts,
                                          experts, k, inv_t);
}

template <class T>
void router_sigmoid_forward(const stream&, const T* logits, const T* bias,
                            int32_t* topk_idx, T* topk_gate, int64_t n,
                            int64_t experts, int64_t k, int64_t n_group,
                            int64_t topk_group, bool normalize, double scale) {
  std::vector<double> group_score(n_group);
  std::vector<char> group_kept(n_group);
  for (int64_t t = 0; t < n; ++t)
    detail::sigmoid_route_row(logits + t * experts, bias, experts, k, n_group,
                              topk_group, normalize, scale, group_score.data(),
                              group_kept.data(), topk_idx + t * k,
                              topk_gate + t * k);
}

template <class T>
void router_sigmoid_backward(const stream&, const int32_t* topk_idx,
                             const T* logits, const T* dgate, T* dlogits,
                             int64_t n, int64_t experts, int64_t k,
                             bool normalize, double scale) {
  for (int64_t t = 0; t < n; ++t)
    detail::sigmoid_route_backward_row(topk_idx + t * k, logits + t * experts,
                                       dgate + t * k, dlogits + t * experts,
                                       experts, k, normalize, scale);
}

// -- auxiliary losses --------------------------------------------------------------

template <class T>
double switch_loss_forward(const stream&, const T* probs, const T* fraction,
                           int64_t n, int64_t experts, double coeff,
                           int64_t global_tokens) {
  // sum_i f_i * sum_x p_i(x), summed token-major in double.
  double acc = 0.0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < experts; ++e)
      acc += double(fraction[e]) * double(probs[t * experts + e]);
  return coeff * double(experts) * acc / double(global_tokens);
}

// f is a count (not differentiable), so dL/dp_i(x) = coeff * E * f_i / T_g
// for every token; then back through p = softmax(logits / temperature).
template <class T>
void switch_loss_backward(const stream&, const T* probs, const T* fraction,
                          T* dlogits, int64_t n, int64_t experts, double coeff,
                          int64_t global_tokens, T temperature) {
  const double c = coeff * double(experts) / double(global_tokens);
  const double inv_t = 1.0 / double(temperature);
  for (int64_t t = 0; t < n; ++t) {
    const T* p = probs + t * experts;
    double dot = 0.0;
    for (int64_t e = 0; e < experts; ++e)
      dot += double(p[e]) * c * double(fraction[e]);
    for (int64_t e = 0; e < experts; ++e)
      dlogits[t * experts + e] += T(inv_t * double(p[e])
                                    * (c * double(fraction[e]) - dot));
  }
}

template <class T>
double z_loss_forward(const stream&, const T* logits, int64_t n,
                      int64_t experts, double coeff, int64_t global_tokens) {
  double acc = 0.0;
  for (int64_t t = 0; t < n; ++t) {
    const double lse = logsumexp_row(logits + t * experts, experts);
    acc += lse * lse;
  }
  return coeff * acc / double(global_tokens);
}

// d lse^2 / d x_j = 2 * lse * softmax(x)_j.
template <class T>
void z_loss_backward(const stream&, const T* logits, T* dlogits, int64_t n,
                     int64_t experts, double coeff, int64_t global_tokens) {
  const double c = 2.0 * coeff / double(global_tokens);
  for (int64_t t = 0; t < n; ++t) {
    const T* row = logits + t * experts;
    const double lse = logsumexp_row(row, experts);
    for (int64_t e = 0; e < experts; ++e)
      dlogits[t * experts + e] += T(c * lse * std::exp(double(row[e]) - lse));
  }
}

// -- capacity and balancing ----------------------------------------------------------

template <class T>
int64_t apply_capacity(const stream&, int32_t* topk_idx, const T* topk_gate,
                       int64_t* counts, int64_t n, int64_t experts, int64_t k,
                       int64_t capacity) {
  // Bucket the slots per expert in token order, so a stable sort by gate
  // (descending) keeps the lower token first on ties.
  std::vector<std::vector<int64_t>> bucket(experts);
  for (int64_t s = 0; s < n * k; ++s)
    if (topk_idx[s] >= 0)
      bucket[topk_idx[s]].push_back(s);
  const int64_t cap = std::max<int64_t>(capacity, 0);
  int64_t dropped = 0;
  for (int64_t e = 0; e < experts; ++e) {
    auto& b = bucket[e];
    const int64_t size = static_cast<int64_t>(b.size());
    if (size > cap) {
      std::stable_sort(b.begin(), b.end(), [&](int64_t x, int64_t y) {
        return topk_gate[x] > topk_gate[y];
      });
      for (int64_t i = cap; i < size; ++i)
        topk_idx[b[i]] = -1;
      dropped += size - cap;
    }
    counts[e] = std::min(size, cap);
  }
  return dropped;
}

template <class T>
void bias_update(const stream&, T* bias, const int64_t* global_counts,
                 int64_t experts, double rate) {
  detail::balance_bias(bias, global_counts, experts, rate);
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_ROUTER
#include "instantiate_ops.inc"

} // namespace tutti::kernels::cpu

namespace tutti::kernels {

// Pure arithmetic on sizes, the same for every backend: not routed.
int64_t expert_capacity(double capacity_factor, int64_t tokens, int64_t k,
                        int64_t experts) {
  if (capacity_factor <= 0.0)
    return std::numeric_limits<int64_t>::max();
  const double c = capacity_factor * double(tokens * k) / double(experts);
  // The cast below must not overflow (a capacity this large never binds).
  if (!(c < 9.0e18))
    return std::numeric_limits<int64_t>::max();
  // A factor like 1.1 is not exact in binary: 1.1 * 10 = 11.000000000000002
  // must give 11, not 12. Values within 1e-9 (relative) of an integer snap.
  const double r = std::round(c);
  if (std::abs(c - r) <= 1e-9 * std::max(1.0, std::abs(c)))
    return static_cast<int64_t>(r);
  return static_cast<int64_t>(std::ceil(c));
}

} // namespace tutti::kernels
