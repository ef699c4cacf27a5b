// The attention half of a decoder layer: x_mid = x + o(attn(rope(q), rope(k),
// v)) on RMSNorm(x), with grouped-query heads; with QK-norm (Qwen3-MoE) q and k
// are RMSNormed per head before the rotary embedding. Under tensor parallelism
// a rank computes heads_ of the query heads and kv_heads_ of the key/value
// heads (its slices of q/k/v_proj's rows and o_proj's columns); o_proj's
// partial outputs are summed over the TP group, and so, backward, are the
// partial gradients of the normed input.

#include <utility>

#include "tutti/model/tensor_names.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/rank_model.hpp"

namespace tutti::train {

namespace k = tutti::kernels;
namespace names = model::names;

status rank_model::attention_forward(int64_t l, int64_t seqs,
                                     step_timers& time) {
  const auto& m = cfg_.model;
  if (m.mla())
    return mla_forward(l, seqs, time);
  auto& a = acts_[l];
  const int64_t s = cfg_.train.seq_len, n = seqs * s, d = m.hidden_size;
  const int64_t hd = m.head_dim(), hq = heads_, hkv = kv_heads_;
  k::rmsnorm_forward(stream_, a.x_in.data(),
                     param(layer_name(l, names::input_norm)), a.xn1.data(),
                     a.rstd1.data(), n, d, static_cast<float>(m.rms_norm_eps));
  const bool qk = m.qk_norm();
  k::linear_forward(stream_, a.xn1.data(), param(layer_name(l, names::q_proj)),
                    qk ? a.q_pre.data() : a.q.data(), n, d, hq * hd);
  k::linear_forward(stream_, a.xn1.data(), param(layer_name(l, names::k_proj)),
                    qk ? a.k_pre.data() : a.k.data(), n, d, hkv * hd);
  if (qk) {
    // Each head's row of head_dim values, one weight for all heads.
    const auto eps = static_cast<float>(m.rms_norm_eps);
    k::rmsnorm_forward(stream_, a.q_pre.data(),
                       param(layer_name(l, names::q_norm)), a.q.data(),
                       a.rstd_q.data(), n * hq, hd, eps);
    k::rmsnorm_forward(stream_, a.k_pre.data(),
                       param(layer_name(l, names::k_norm)), a.k.data(),
                       a.rstd_k.data(), n * hkv, hd, eps);
  }
  k::linear_forward(stream_, a.xn1.data(), param(layer_name(l, names::v_proj)),
                    a.v.data(), n, d, hkv * hd);
  k::rope_forward(stream_, a.q.data(), seqs, s, hq, hd, m.rope_theta);
  k::rope_forward(stream_, a.k.data(), seqs, s, hkv, hd, m.rope_theta);
  attention_core_forward(a, seqs);
  k::linear_forward(stream_, a.attn.data(), param(layer_name(l, names::o_proj)),
                    a.x_mid.data(), n, hq * hd, d);
  TUTTI_RETURN_IF_ERROR(tp_sum(a.x_mid.data(), n * d, time));
  k::axpy(stream_, 1.0f, a.x_in.data(), a.x_mid.data(), n * d);
  return {};
}

// Tiled where kernels::attention_is_tiled says (CUDA, long sequences):
// no [s, s] buffer; else the [s, s] probabilities are kept. With MLA the
// heads are qk_head_dim wide (mla_block.cpp).
void rank_model::attention_core_forward(layer_acts& a, int64_t seqs) {
  const int64_t s = cfg_.train.seq_len, hd = core_head_dim();
  if (k::attention_is_tiled(stream_.device, s))
    k::attention_forward_tiled(stream_, a.q.data(), a.k.data(), a.v.data(),
                               a.attn.data(), a.attn_saved.data(), seqs, s,
                               heads_, kv_heads_, hd);
  else
    k::attention_forward(stream_, a.q.data(), a.k.data(), a.v.data(),
                         a.attn.data(), a.attn_saved.data(), seqs, s, heads_,
                         kv_heads_, hd);
}

// dx: gradient of x_mid in, gradient of x_in out.
status rank_model::attention_backward(int64_t l, int64_t seqs,
                                      tensor<float>& dx, step_timers& time) {
  const auto& m = cfg_.model;
  if (m.mla())
    return mla_backward(l, seqs, dx, time);
  auto& a = acts_[l];
  const int64_t s = cfg_.train.seq_len, n = seqs * s, d = m.hidden_size;
  const int64_t hd = m.head_dim(), hq = heads_, hkv = kv_heads_;
  dattn_.resize(stream_, n * hq * hd);
  dq_.resize(stream_, n * hq * hd);
  dk_.resize(stream_, n * hkv * hd);
  dv_.resize(stream_, n * hkv * hd);
  dtmp_.resize(stream_, n * d);
  dtmp2_.resize(stream_, n * d);

  k::linear_backward(
    stream_, a.attn.data(), param(layer_name(l, names::o_proj)), dx.data(),
    dattn_.data(), grad(layer_name(l, names::o_proj)), n, hq * hd, d);
  if (k::attention_is_tiled(stream_.device, s))
    k::attention_backward_tiled(stream_, a.q.data(), a.k.data(), a.v.data(),
                                a.attn.data(), a.attn_saved.data(),
                                dattn_.data(), dq_.data(), dk_.data(),
                                dv_.data(), seqs, s, hq, hkv, hd);
  else
    k::attention_backward(stream_, a.q.data(), a.k.data(), a.v.data(),
                          a.attn_saved.data(), dattn_.data(), dq_.data(),
                          dk_.data(), dv_.data(), seqs, s, hq, hkv, hd);
  k::rope_backward(stream_, dq_.data(), seqs, s, hq, hd, m.rope_theta);
  k::rope_backward(stream_, dk_.data(), seqs, s, hkv, hd, m.rope_theta);
  if (m.qk_norm())
    TUTTI_RETURN_IF_ERROR(qk_norm_backward(l, n, time));
  k::linear_backward(stream_, a.xn1.data(), param(layer_name(l, names::q_proj)),
                     dq_.data(), dtmp_.data(),
                     grad(layer_name(l, names::q_proj)), n, d, hq * hd);
  // k and v read the same input: their input gradients are added to q's in
  // the GEMMs themselves.
  const std::pair<const char*, const float*> kv[] = {
    {names::k_proj, dk_.data()}, {names::v_proj, dv_.data()}};
  for (const auto& [proj, dy] : kv) {
    k::linear_input_grad(stream_, param(layer_name(l, proj)), dy, dtmp_.data(),
                         n, d, hkv * hd, true);
    k::linear_weight_grad_rows(stream_, a.xn1.data(), dy,
                               grad(layer_name(l, proj)), n, d, hkv * hd, 0,
                               hkv * hd);
  }
  TUTTI_RETURN_IF_ERROR(tp_sum(dtmp_.data(), n * d, time));
  k::rmsnorm_backward(stream_, a.x_in.data(),
                      param(layer_name(l, names::input_norm)), a.rstd1.data(),
                      dtmp_.data(), dtmp2_.data(),
                      grad(layer_name(l, names::input_norm)), n, d);
  k::axpy(stream_, 1.0f, dtmp2_.data(), dx.data(), n * d);
  return {};
}

// Through the per-head RMSNorm of q and k: dq_ and dk_ become the
// gradients of q_proj's and k_proj's outputs. A TP rank holds some of the
// heads, so the norm weights' gradients are partial: summed over the TP
// group before they join the layer's.
status rank_model::qk_norm_backward(int64_t l, int64_t n, step_timers& time) {
  auto& a = acts_[l];
  const int64_t hd = cfg_.model.head_dim(), hq = heads_, hkv = kv_heads_;
  dq_pre_.resize(stream_, n * hq * hd);
  dk_pre_.resize(stream_, n * hkv * hd);
  dqk_norm_.zeros(stream_, 2 * hd);
  k::rmsnorm_backward(stream_, a.q_pre.data(),
                      param(layer_name(l, names::q_norm)), a.rstd_q.data(),
                      dq_.data(), dq_pre_.data(), dqk_norm_.data(), n * hq, hd);
  k::rmsnorm_backward(stream_, a.k_pre.data(),
                      param(layer_name(l, names::k_norm)), a.rstd_k.data(),
                      dk_.data(), dk_pre_.data(), dqk_norm_.data() + hd,
                      n * hkv, hd);
  TUTTI_RETURN_IF_ERROR(tp_sum(dqk_norm_.data(), 2 * hd, time));
  k::axpy(stream_, 1.0f, dqk_norm_.data(), grad(layer_name(l, names::q_norm)),
          hd);
  k::axpy(stream_, 1.0f, dqk_norm_.data() + hd,
          grad(layer_name(l, names::k_norm)), hd);
  std::swap(dq_, dq_pre_);
  std::swap(dk_, dk_pre_);
  return {};
}

} // namespace tutti::train
