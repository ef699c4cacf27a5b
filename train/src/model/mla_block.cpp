// The attention half of a decoder layer with multi-head latent attention
// (DeepSeek-V3's MLA, mla_attention.hpp): x_mid = x + o(attn(q, k, v)) on
// RMSNorm(x), q, k and v from the latents. Under tensor parallelism a rank
// computes heads_ of the heads (its slices of q_proj / q_b_proj's and
// kv_b_proj's rows and o_proj's columns) from the latents every rank
// computes whole: the latents' weight gradients are partial, summed over
// the TP group, as are o_proj's partial outputs and the partial gradients
// of the normed input.

#include <utility>

#include "tutti/kernels/ops.hpp"
#include "tutti/model/tensor_names.hpp"
#include "tutti/train/rank_model.hpp"

namespace tutti::train {

namespace k = tutti::kernels;
namespace names = model::names;

mla::dims rank_model::mla_dims(int64_t seqs) const {
  const auto& m = cfg_.model;
  mla::dims d;
  d.batch = seqs;
  d.seq = cfg_.train.seq_len;
  d.hidden = m.hidden_size;
  d.heads = heads_;
  d.q_rank = m.q_lora_rank;
  d.kv_rank = m.kv_lora_rank;
  d.nope = m.qk_nope_head_dim;
  d.rope = m.qk_rope_head_dim;
  d.v = m.v_head_dim;
  d.theta = m.rope_theta;
  d.interleave = m.rope_interleave;
  d.eps = m.rms_norm_eps;
  return d;
}

int64_t rank_model::core_head_dim() const {
  return cfg_.model.mla() ? cfg_.model.qk_head_dim() : cfg_.model.head_dim();
}

mla::weights<float> rank_model::mla_weights(int64_t l) {
  mla::weights<float> w;
  if (cfg_.model.q_lora_rank > 0) {
    w.q_a = param(layer_name(l, names::q_a_proj));
    w.q_a_norm = param(layer_name(l, names::q_a_norm));
    w.q_b = param(layer_name(l, names::q_b_proj));
  } else {
    w.q_proj = param(layer_name(l, names::q_proj));
  }
  w.kv_a = param(layer_name(l, names::kv_a_proj));
  w.kv_a_norm = param(layer_name(l, names::kv_a_norm));
  w.kv_b = param(layer_name(l, names::kv_b_proj));
  return w;
}

status rank_model::mla_forward(int64_t l, int64_t seqs, step_timers& time) {
  const auto& m = cfg_.model;
  auto& a = acts_[l];
  const auto d = mla_dims(seqs);
  const int64_t n = d.tokens(), hidden = m.hidden_size;
  k::rmsnorm_forward(stream_, a.x_in.data(),
                     param(layer_name(l, names::input_norm)), a.xn1.data(),
                     a.rstd1.data(), n, hidden,
                     static_cast<float>(m.rms_norm_eps));
  mla_tmp_.pe.resize(stream_, n * d.heads * d.rope);
  mla::forward(stream_, d, mla_weights(l), a.xn1.data(), a.mla, a.q.data(),
               a.k.data(), a.v.data(), mla_tmp_.pe.data());
  attention_core_forward(a, seqs);
  mla::pack_output(stream_, d, a.attn.data(), a.attn_packed.data());
  k::linear_forward(stream_, a.attn_packed.data(),
                    param(layer_name(l, names::o_proj)), a.x_mid.data(), n,
                    d.heads * d.v, hidden);
  TUTTI_RETURN_IF_ERROR(tp_sum(a.x_mid.data(), n * hidden, time));
  k::axpy(stream_, 1.0f, a.x_in.data(), a.x_mid.data(), n * hidden);
  return {};
}

// dx: gradient of x_mid in, gradient of x_in out.
status rank_model::mla_backward(int64_t l, int64_t seqs, tensor<float>& dx,
                                step_timers& time) {
  const auto& m = cfg_.model;
  auto& a = acts_[l];
  const auto d = mla_dims(seqs);
  const int64_t s = d.seq, n = d.tokens(), hidden = m.hidden_size;
  const int64_t h = d.heads, qk = d.qk();
  dattn_.resize(stream_, n * h * d.v);
  dattn_core_.resize(stream_, n * h * qk);
  for (auto* buf : {&dq_, &dk_, &dv_})
    buf->resize(stream_, n * h * qk);
  dtmp_.resize(stream_, n * hidden);
  dtmp2_.resize(stream_, n * hidden);

  k::linear_backward(stream_, a.attn_packed.data(),
                     param(layer_name(l, names::o_proj)), dx.data(),
                     dattn_.data(), grad(layer_name(l, names::o_proj)), n,
                     h * d.v, hidden);
  mla::unpack_output_grad(stream_, d, dattn_.data(), dattn_core_.data());
  if (k::attention_is_tiled(stream_.device, s))
    k::attention_backward_tiled(stream_, a.q.data(), a.k.data(), a.v.data(),
                                a.attn.data(), a.attn_saved.data(),
                                dattn_core_.data(), dq_.data(), dk_.data(),
                                dv_.data(), seqs, s, h, h, qk);
  else
    k::attention_backward(stream_, a.q.data(), a.k.data(), a.v.data(),
                          a.attn_saved.data(), dattn_core_.data(), dq_.data(),
                          dk_.data(), dv_.data(), seqs, s, h, h, qk);

  // The per-head weights' gradients go straight to the layer's; the
  // replicated latents' through one buffer summed over the TP group.
  const bool tp = comms_.tp != nullptr;
  const int64_t q_a = d.q_rank * hidden, kv_a = d.latent() * hidden;
  const int64_t latents = q_a + d.q_rank + kv_a + d.kv_rank;
  if (tp)
    dmla_latents_.zeros(stream_, latents);
  float* part = tp ? dmla_latents_.data() : nullptr;
  auto replicated = [&](const char* name, int64_t offset) {
    return tp ? part + offset : grad(layer_name(l, name));
  };
  mla::grads<float> g;
  if (d.q_rank > 0) {
    g.q_a = replicated(names::q_a_proj, 0);
    g.q_a_norm = replicated(names::q_a_norm, q_a);
    g.q_b = grad(layer_name(l, names::q_b_proj));
  } else {
    g.q_proj = grad(layer_name(l, names::q_proj));
  }
  g.kv_a = replicated(names::kv_a_proj, q_a + d.q_rank);
  g.kv_a_norm = replicated(names::kv_a_norm, q_a + d.q_rank + kv_a);
  g.kv_b = grad(layer_name(l, names::kv_b_proj));
  mla::backward(stream_, d, mla_weights(l), a.xn1.data(), a.mla, dq_.data(),
                dk_.data(), dv_.data(), g, mla_tmp_, dtmp_.data());
  if (tp) {
    TUTTI_RETURN_IF_ERROR(tp_sum(part, latents, time));
    const std::pair<const char*, int64_t> pieces[] = {
      {names::q_a_proj, q_a},
      {names::q_a_norm, d.q_rank},
      {names::kv_a_proj, kv_a},
      {names::kv_a_norm, d.kv_rank}};
    int64_t at = 0;
    for (const auto& [name, count] : pieces) {
      if (count > 0)
        k::axpy(stream_, 1.0f, part + at, grad(layer_name(l, name)), count);
      at += count;
    }
  }
  TUTTI_RETURN_IF_ERROR(tp_sum(dtmp_.data(), n * hidden, time));
  k::rmsnorm_backward(stream_, a.x_in.data(),
                      param(layer_name(l, names::input_norm)), a.rstd1.data(),
                      dtmp_.data(), dtmp2_.data(),
                      grad(layer_name(l, names::input_norm)), n, hidden);
  k::axpy(stream_, 1.0f, dtmp2_.data(), dx.data(), n * hidden);
  return {};
}

} // namespace tutti::train
