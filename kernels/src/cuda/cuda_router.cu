// MoE router on CUDA: top-k + gates, Switch and z losses, capacity and
// DeepSeek-V3 bias balancing.
//
// Routing must make the same decision as the CPU: scores are compared in
// double exactly as cpu_router.cpp forms them (logit + bias), with the same
// strict '>' in index order, so ties go to the lower expert index on both.
// One thread per token: the expert count is small (8..256).

#include <cmath>

#include "../host_device.hpp"
#include "cuda_common.cuh"

namespace tutti::kernels::cuda {
namespace {

template <class T>
__global__ void topk_fwd(const T* logits, const T* bias, int32_t* topk_idx,
                         T* topk_gate, T* probs, int64_t n, int64_t experts,
                         int64_t k, double inv_t) {
  TUTTI_GRID_STRIDE(t, n) {
    const T* row = logits + t * experts;
    int32_t* idx = topk_idx + t * k;
    // k passes of argmax; the experts already taken are the slots before.
    for (int64_t slot = 0; slot < k; ++slot) {
      int64_t best = -1;
      double best_score = 0.0;
      for (int64_t e = 0; e < experts; ++e) {
        bool taken = false;
        for (int64_t q = 0; q < slot; ++q)
          taken |= idx[q] == e;
        if (taken)
          continue;
        const double sc = double(row[e]) + (bias ? double(bias[e]) : 0.0);
        if (best < 0 || sc > best_score)
          best = e, best_score = sc;
      }
      idx[slot] = int32_t(best);
    }
    // gate = softmax over the chosen raw logits / temperature.
    double mx = -INFINITY;
    for (int64_t q = 0; q < k; ++q)
      mx = fmax(mx, double(row[idx[q]]) * inv_t);
    double denom = 0.0;
    for (int64_t q = 0; q < k; ++q)
      denom += exp(double(row[idx[q]]) * inv_t - mx);
    for (int64_t q = 0; q < k; ++q)
      topk_gate[t * k + q] = T(exp(double(row[idx[q]]) * inv_t - mx) / denom);
    if (probs != nullptr) {
      mx = -INFINITY;
      for (int64_t e = 0; e < experts; ++e)
        mx = fmax(mx, double(row[e]) * inv_t);
      denom = 0.0;
      for (int64_t e = 0; e < experts; ++e)
        denom += exp(double(row[e]) * inv_t - mx);
      for (int64_t e = 0; e < experts; ++e)
        probs[t * experts + e] = T(exp(double(row[e]) * inv_t - mx) / denom);
    }
  }
}

template <class T>
__global__ void topk_bwd(const int32_t* topk_idx, const T* topk_gate,
                         const T* dgate, T* dlogits, int64_t n, int64_t experts,
                         int64_t k, double inv_t) {
  TUTTI_GRID_STRIDE(t, n) {
    const T* g = topk_gate + t * k;
    const T* dg = dgate + t * k;
    T* out = dlogits + t * experts;
    for (int64_t e = 0; e < experts; ++e)
      out[e] = T(0);
    double dot = 0.0;
    for (int64_t j = 0; j < k; ++j)
      dot += double(g[j]) * double(dg[j]);
    for (int64_t j = 0; j < k; ++j)
      out[topk_idx[t * k + j]] = T(inv_t * double(g[j])
                                   * (double(dg[j]) - dot));
  }
}

template <class T>
struct switch_term {
  const T* probs;
  const T* fraction;
  int64_t experts;
  __device__ double operator()(int64_t i) const {
    return double(fraction[i % experts]) * double(probs[i]);
  }
};

template <class T>
__global__ void switch_bwd(const T* probs, const T* fraction, T* dlogits,
                           int64_t n, int64_t experts, double c, double inv_t) {
  TUTTI_GRID_STRIDE(t, n) {
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
__device__ double logsumexp_row(const T* x, int64_t len) {
  double mx = -INFINITY;
  for (int64_t j = 0; j < len; ++j)
    mx = fmax(mx, double(x[j]));
  double acc = 0.0;
  for (int64_t j = 0; j < len; ++j)
    acc += exp(double(x[j]) - mx);
  return mx + log(acc);
}

template <class T>
struct z_term {
  const T* logits;
  int64_t experts;
  __device__ double operator()(int64_t t) const {
    const double lse = logsumexp_row(logits + t * experts, experts);
    return lse * lse;
  }
};

template <class T>
__global__ void z_bwd(const T* logits, T* dlogits, int64_t n, int64_t experts,
                      double c) {
  TUTTI_GRID_STRIDE(t, n) {
    const T* row = logits + t * experts;
    const double lse = logsumexp_row(row, experts);
    for (int64_t e = 0; e < experts; ++e)
      dlogits[t * experts + e] += T(c * lse * exp(double(row[e]) - lse));
  }
}

// One block per expert: how many slots chose it; counts[e] = min(size, cap).
__global__ void capacity_sizes(const int32_t* topk_idx, int64_t slots,
                               int64_t capacity, int64_t* size,
                               int64_t* counts) {
  const int32_t e = int32_t(blockIdx.x);
  long long mine = 0;
  for (int64_t s = threadIdx.x; s < slots; s += blockDim.x)
    mine += topk_idx[s] == e;
  const long long total = block_sum(mine);
  if (threadIdx.x == 0) {
    size[e] = total;
    counts[e] = total < capacity ? total : capacity;
  }
}

// One thread per slot of an over-full expert: its rank in the CPU's order
// (gate descending, then slot ascending); kept when rank < capacity.
// Quadratic in the expert's slots, and only over-full experts pay it.
template <class T>
__global__ void capacity_keep(const int32_t* topk_idx, const T* topk_gate,
                              const int64_t* size, int64_t slots,
                              int64_t capacity, unsigned char* keep) {
  TUTTI_GRID_STRIDE(s, slots) {
    const int32_t e = topk_idx[s];
    if (e < 0 || size[e] <= capacity) {
      keep[s] = 1;
      continue;
    }
    const T g = topk_gate[s];
    int64_t rank = 0;
    for (int64_t o = 0; o < slots && rank < capacity; ++o) {
      if (topk_idx[o] != e)
        continue;
      const T go = topk_gate[o];
      rank += (go > g) || (go == g && o < s);
    }
    keep[s] = rank < capacity;
  }
}

__global__ void capacity_apply(int32_t* topk_idx, const unsigned char* keep,
                               int64_t slots) {
  TUTTI_GRID_STRIDE(s, slots) if (!keep[s]) topk_idx[s] = -1;
}

struct dropped_term {
  const int64_t* size;
  int64_t capacity;
  __device__ double operator()(int64_t e) const {
    return size[e] > capacity ? double(size[e] - capacity) : 0.0;
  }
};

template <class T>
__global__ void gates_from_probs(const int32_t* topk_idx, const T* probs,
                                 T* topk_gate, int64_t n, int64_t experts,
                                 int64_t k) {
  TUTTI_GRID_STRIDE(i, n * k) {
    topk_gate[i] = probs[(i / k) * experts + topk_idx[i]];
  }
}

// One thread per token, the CPU's code (host_device.hpp).
template <class T>
__global__ void gates_from_probs_bwd(const int32_t* topk_idx, const T* probs,
                                     const T* dgate, T* dlogits, int64_t n,
                                     int64_t experts, int64_t k,
                                     double inv_t) {
  TUTTI_GRID_STRIDE(t, n) {
    detail::gates_from_probs_backward_row(topk_idx + t * k, probs + t * experts,
                                          dgate + t * k, dlogits + t * experts,
                                          experts, k, inv_t);
  }
}

// A handful of experts: one thread, the CPU's code and order.
template <class T>
__global__ void bias_update_kernel(T* bias, const int64_t* counts,
                                   int64_t experts, double rate) {
  detail::balance_bias(bias, counts, experts, rate);
}

// The CPU's row routine, one thread per token; the group scratch lives in
// the thread's registers or local memory.
constexpr int64_t max_groups = 256;

template <class T>
__global__ void sigmoid_fwd(const T* logits, const T* bias, int32_t* topk_idx,
                            T* topk_gate, int64_t n, int64_t experts, int64_t k,
                            int64_t n_group, int64_t topk_group, bool normalize,
                            double scale) {
  TUTTI_GRID_STRIDE(t, n) {
    double group_score[max_groups];
    char group_kept[max_groups];
    detail::sigmoid_route_row(logits + t * experts, bias, experts, k, n_group,
                              topk_group, normalize, scale, group_score,
                              group_kept, topk_idx + t * k, topk_gate + t * k);
  }
}

template <class T>
__global__ void sigmoid_bwd(const int32_t* topk_idx, const T* logits,
                            const T* dgate, T* dlogits, int64_t n,
                            int64_t experts, int64_t k, bool normalize,
                            double scale) {
  TUTTI_GRID_STRIDE(t, n) {
    detail::sigmoid_route_backward_row(topk_idx + t * k, logits + t * experts,
                                       dgate + t * k, dlogits + t * experts,
                                       experts, k, normalize, scale);
  }
}

} // namespace

template <class T>
void router_sigmoid_forward(const stream& s, const T* logits, const T* bias,
                            int32_t* topk_idx, T* topk_gate, int64_t n,
                            int64_t experts, int64_t k, int64_t n_group,
                            int64_t topk_group, bool normalize, double scale) {
  if (n == 0)
    return;
  TUTTI_DEVICE_REQUIRE(n_group >= 1 && n_group <= max_groups
                         && experts % n_group == 0 && topk_group >= 1
                         && topk_group <= n_group
                         && k <= topk_group * (experts / n_group),
                       "router: bad n_group, topk_group or k");
  sigmoid_fwd<<<grid_for(n, 128), 128, 0, raw(s)>>>(
    logits, bias, topk_idx, topk_gate, n, experts, k, n_group, topk_group,
    normalize, scale);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void router_sigmoid_backward(const stream& s, const int32_t* topk_idx,
                             const T* logits, const T* dgate, T* dlogits,
                             int64_t n, int64_t experts, int64_t k,
                             bool normalize, double scale) {
  if (n == 0)
    return;
  sigmoid_bwd<<<grid_for(n, 128), 128, 0, raw(s)>>>(
    topk_idx, logits, dgate, dlogits, n, experts, k, normalize, scale);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void router_topk_forward(const stream& s, const T* logits, const T* bias,
                         int32_t* topk_idx, T* topk_gate, T* probs, int64_t n,
                         int64_t experts, int64_t k, T temperature) {
  if (n == 0)
    return;
  TUTTI_DEVICE_REQUIRE(k >= 1 && k <= experts,
                       "router: need 1 <= k <= experts");
  topk_fwd<<<grid_for(n, 128), 128, 0, raw(s)>>>(logits, bias, topk_idx,
                                                 topk_gate, probs, n, experts,
                                                 k, 1.0 / double(temperature));
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void router_topk_backward(const stream& s, const int32_t* topk_idx,
                          const T* topk_gate, const T* dgate, T* dlogits,
                          int64_t n, int64_t experts, int64_t k,
                          T temperature) {
  if (n == 0)
    return;
  topk_bwd<<<grid_for(n, 128), 128, 0, raw(s)>>>(topk_idx, topk_gate, dgate,
                                                 dlogits, n, experts, k,
                                                 1.0 / double(temperature));
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void router_gates_from_probs(const stream& s, const int32_t* topk_idx,
                             const T* probs, T* topk_gate, int64_t n,
                             int64_t experts, int64_t k) {
  if (n == 0)
    return;
  gates_from_probs<<<grid_for(n * k, 128), 128, 0, raw(s)>>>(
    topk_idx, probs, topk_gate, n, experts, k);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void router_gates_from_probs_backward(const stream& s, const int32_t* topk_idx,
                                      const T* probs, const T* dgate,
                                      T* dlogits, int64_t n, int64_t experts,
                                      int64_t k, T temperature) {
  if (n == 0)
    return;
  gates_from_probs_bwd<<<grid_for(n, 128), 128, 0, raw(s)>>>(
    topk_idx, probs, dgate, dlogits, n, experts, k, 1.0 / double(temperature));
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
double switch_loss_forward(const stream& s, const T* probs, const T* fraction,
                           int64_t n, int64_t experts, double coeff,
                           int64_t global_tokens) {
  const double acc = reduce_to_host(s, n * experts,
                                    switch_term<T>{probs, fraction, experts});
  return coeff * double(experts) * acc / double(global_tokens);
}

template <class T>
void switch_loss_backward(const stream& s, const T* probs, const T* fraction,
                          T* dlogits, int64_t n, int64_t experts, double coeff,
                          int64_t global_tokens, T temperature) {
  if (n == 0)
    return;
  const double c = coeff * double(experts) / double(global_tokens);
  switch_bwd<<<grid_for(n, 128), 128, 0, raw(s)>>>(
    probs, fraction, dlogits, n, experts, c, 1.0 / double(temperature));
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
double z_loss_forward(const stream& s, const T* logits, int64_t n,
                      int64_t experts, double coeff, int64_t global_tokens) {
  const double acc = reduce_to_host(s, n, z_term<T>{logits, experts});
  return coeff * acc / double(global_tokens);
}

template <class T>
void z_loss_backward(const stream& s, const T* logits, T* dlogits, int64_t n,
                     int64_t experts, double coeff, int64_t global_tokens) {
  if (n == 0)
    return;
  z_bwd<<<grid_for(n, 128), 128, 0, raw(s)>>>(
    logits, dlogits, n, experts, 2.0 * coeff / double(global_tokens));
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
int64_t apply_capacity(const stream& s, int32_t* topk_idx, const T* topk_gate,
                       int64_t* counts, int64_t n, int64_t experts, int64_t k,
                       int64_t capacity) {
  if (experts == 0)
    return 0;
  const int64_t slots = n * k;
  const int64_t cap = capacity < 0 ? 0 : capacity;
  carver size_of;
  size_of.take<int64_t>(experts);
  size_of.take<unsigned char>(slots);
  carver cut(scratch(s, size_of.bytes()));
  int64_t* size = cut.take<int64_t>(experts);
  unsigned char* keep = cut.take<unsigned char>(slots);
  capacity_sizes<<<as_int(experts, "experts"), kThreads, 0, raw(s)>>>(
    topk_idx, slots, cap, size, counts);
  TUTTI_CUDA_LAUNCH_CHECK();
  if (slots > 0) {
    // All ranks are computed from the unmodified topk_idx, then applied.
    capacity_keep<<<grid_for(slots), kThreads, 0, raw(s)>>>(
      topk_idx, topk_gate, size, slots, cap, keep);
    TUTTI_CUDA_LAUNCH_CHECK();
    capacity_apply<<<grid_for(slots), kThreads, 0, raw(s)>>>(topk_idx, keep,
                                                             slots);
    TUTTI_CUDA_LAUNCH_CHECK();
  }
  // Integers below 2^53 add exactly in double.
  return int64_t(reduce_to_host(s, experts, dropped_term{size, cap}));
}

template <class T>
void bias_update(const stream& s, T* bias, const int64_t* global_counts,
                 int64_t experts, double rate) {
  if (experts == 0)
    return;
  bias_update_kernel<<<1, 1, 0, raw(s)>>>(bias, global_counts, experts, rate);
  TUTTI_CUDA_LAUNCH_CHECK();
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_ROUTER
#include "../instantiate_ops.inc"

} // namespace tutti::kernels::cuda
