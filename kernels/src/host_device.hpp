#pragma once
// Internal: arithmetic that both backends run as written, the CPU on the
// host and the CUDA kernels on the device, so the two cannot drift apart.
// The CPU files are compiled by the host compiler, where TUTTI_HOST_DEVICE
// is empty; the .cu files by nvcc.

#include <math.h>

#include <cstdint>

#ifdef __CUDACC__
#define TUTTI_HOST_DEVICE __host__ __device__
#else
#define TUTTI_HOST_DEVICE
#endif

namespace tutti::kernels::detail {

// Written so that exp never overflows for large |g|. (::exp is the C
// library's on the host, CUDA's on the device.)
TUTTI_HOST_DEVICE inline double sigmoid(double g) {
  if (g >= 0.0)
    return 1.0 / (1.0 + ::exp(-g));
  const double e = ::exp(g);
  return e / (1.0 + e);
}

// DeepSeek-V3 bias balancing, bias_i += rate * sign(mean(counts) - counts_i),
// over the few experts in index order (one thread on the device).
template <class T>
TUTTI_HOST_DEVICE void balance_bias(T* bias, const int64_t* counts,
                                    int64_t experts, double rate) {
  double mean = 0.0;
  for (int64_t e = 0; e < experts; ++e)
    mean += double(counts[e]);
  mean /= double(experts);
  for (int64_t e = 0; e < experts; ++e) {
    const double diff = mean - double(counts[e]);
    const double sign = diff > 0.0 ? 1.0 : (diff < 0.0 ? -1.0 : 0.0);
    bias[e] += T(rate * sign);
  }
}

// DeepSeek-V3's router for one token (HF DeepseekV3TopkRouter): score_e =
// sigmoid(logit_e), choice on score_e + bias_e. Groups (n_group blocks of
// contiguous experts) are ranked by the sum of their two best biased
// scores (the one, in groups of one); the topk_group best are kept and the
// k experts taken best-first from them alone (as vLLM and DeepSeek's own
// inference code; Hugging Face fills the dropped groups with 0, which
// differs only when a kept expert's biased score is negative). Ties go to
// the lower index, groups and experts alike. Gates are the unbiased scores
// of the chosen, over their sum (+1e-20) when `normalize`, times `scale`.
// Scratch: group_score[n_group], group_kept[n_group].
template <class T>
TUTTI_HOST_DEVICE void sigmoid_route_row(const T* logit, const T* bias,
                                         int64_t experts, int64_t k,
                                         int64_t n_group, int64_t topk_group,
                                         bool normalize, double scale,
                                         double* group_score, char* group_kept,
                                         int32_t* idx, T* gate) {
  const int64_t per = experts / n_group;
  auto biased = [&](int64_t e) {
    return sigmoid(double(logit[e])) + (bias ? double(bias[e]) : 0.0);
  };
  for (int64_t g = 0; g < n_group; ++g) {
    double first = -INFINITY, second = -INFINITY;
    for (int64_t e = g * per; e < (g + 1) * per; ++e) {
      const double sc = biased(e);
      if (sc > first)
        second = first, first = sc;
      else if (sc > second)
        second = sc;
    }
    group_score[g] = per > 1 ? first + second : first;
    group_kept[g] = 0;
  }
  for (int64_t pick = 0; pick < topk_group; ++pick) {
    int64_t best = -1;
    for (int64_t g = 0; g < n_group; ++g)
      if (!group_kept[g] && (best < 0 || group_score[g] > group_score[best]))
        best = g;
    group_kept[best] = 1;
  }
  // k passes of argmax over the kept groups; taken experts are the slots
  // before.
  for (int64_t slot = 0; slot < k; ++slot) {
    int64_t best = -1;
    double best_score = 0.0;
    for (int64_t e = 0; e < experts; ++e) {
      if (!group_kept[e / per])
        continue;
      bool taken = false;
      for (int64_t q = 0; q < slot; ++q)
        taken |= idx[q] == e;
      if (taken)
        continue;
      const double sc = biased(e);
      if (best < 0 || sc > best_score)
        best = e, best_score = sc;
    }
    idx[slot] = static_cast<int32_t>(best);
  }
  double sum = 0.0;
  for (int64_t slot = 0; slot < k; ++slot)
    sum += sigmoid(double(logit[idx[slot]]));
  const double factor = normalize ? scale / (sum + 1e-20) : scale;
  for (int64_t slot = 0; slot < k; ++slot)
    gate[slot] = T(sigmoid(double(logit[idx[slot]])) * factor);
}

// dlogit from dgate through those gates (the choice is a constant):
// g_j = c s_j with c = scale / (S + 1e-20) (S = sum of the chosen s) or
// scale, so ds_j = c dg_j - (sum_i dg_i g_i) / (S + 1e-20) when
// normalized, and dlogit_j = ds_j s_j (1 - s_j). Unchosen experts get 0.
template <class T>
TUTTI_HOST_DEVICE void sigmoid_route_backward_row(
  const int32_t* idx, const T* logit, const T* dgate, T* dlogit,
  int64_t experts, int64_t k, bool normalize, double scale) {
  for (int64_t e = 0; e < experts; ++e)
    dlogit[e] = T(0);
  double sum = 0.0;
  for (int64_t j = 0; j < k; ++j)
    sum += sigmoid(double(logit[idx[j]]));
  const double denom = sum + 1e-20;
  const double c = normalize ? scale / denom : scale;
  double dot = 0.0; // sum_i dg_i g_i
  for (int64_t j = 0; j < k; ++j)
    dot += double(dgate[j]) * c * sigmoid(double(logit[idx[j]]));
  for (int64_t j = 0; j < k; ++j) {
    const double sj = sigmoid(double(logit[idx[j]]));
    const double ds = c * double(dgate[j]) - (normalize ? dot / denom : 0.0);
    dlogit[idx[j]] = T(ds * sj * (1.0 - sj));
  }
}

// One token's backward of gates read from the softmax over all experts at
// the chosen ones (no renormalisation): d logits = p (dgate_chosen - <dg, p>)
// / temperature, the chosen experts' term added to every expert's.
template <class T>
TUTTI_HOST_DEVICE void gates_from_probs_backward_row(const int32_t* idx,
                                                     const T* p, const T* dg,
                                                     T* out, int64_t experts,
                                                     int64_t k, double inv_t) {
  double dot = 0.0;
  for (int64_t j = 0; j < k; ++j)
    dot += double(dg[j]) * double(p[idx[j]]);
  for (int64_t e = 0; e < experts; ++e)
    out[e] = T(-inv_t * double(p[e]) * dot);
  for (int64_t j = 0; j < k; ++j)
    out[idx[j]] = T(inv_t * double(p[idx[j]]) * (double(dg[j]) - dot));
}

} // namespace tutti::kernels::detail
