#pragma once
// An independent float64 forward of a decoder with Hugging Face's
// DeepseekV3Attention (modeling_deepseek_v3.py), multi-head latent
// attention, written from the published architecture over the tensors'
// Hugging Face names: the query from q_proj, or q_b_proj(RMSNorm(q_a_proj
// (x))); kv_a_proj_with_mqa(x) split into the latent c and the rotated key
// k_pe; keys' unrotated parts and values from kv_b_proj(RMSNorm(c));
// rotate_half on q_pe and k_pe only (de-interleaved first with
// rope_interleave), k_pe shared by every head; causal attention scaled by
// 1/sqrt(qk_nope_head_dim + qk_rope_head_dim); o_proj. The MoE half and
// the norms are qwen3_reference's (its MoE names: mlp.gate, mlp.experts;
// its dense layers and shared experts).
// No tutti code.

#include <cmath>
#include <vector>

#include "qwen3_reference.hpp"

namespace tutti::testing {

struct mla_reference {
  qwen3_reference base; // sizes, norms, MoE and the tensors
  int64_t q_lora_rank = 0, kv_lora_rank = 0, nope = 0, rope = 0, v = 0;
  bool interleave = false;

  int64_t qk() const { return nope + rope; }

  // The rotary embedding of one rotated slice of `rope` values at x, at
  // position p.
  void rotate(double* x, int64_t p) const {
    std::vector<double> in(x, x + rope);
    if (interleave)
      for (int64_t i = 0; i < rope / 2; ++i) {
        in[i] = x[2 * i];
        in[rope / 2 + i] = x[2 * i + 1];
      }
    const int64_t half = rope / 2;
    for (int64_t i = 0; i < half; ++i) {
      const double f = double(p)
                       * std::pow(base.rope_theta,
                                  -2.0 * double(i) / double(rope));
      x[i] = in[i] * std::cos(f) - in[i + half] * std::sin(f);
      x[i + half] = in[i + half] * std::cos(f) + in[i] * std::sin(f);
    }
  }

  // The logits [position][vocab] of a sequence.
  std::vector<std::vector<double>> logits(
    const std::vector<int32_t>& tokens) const {
    const auto& b = base;
    const int64_t P = static_cast<int64_t>(tokens.size()), D = b.hidden;
    const int64_t H = b.heads, qk = this->qk(), per = nope + v;
    std::vector<std::vector<double>> x(P);
    const auto& embed = b.at("model.embed_tokens.weight");
    for (int64_t p = 0; p < P; ++p)
      x[p].assign(embed.begin() + tokens[p] * D,
                  embed.begin() + (tokens[p] + 1) * D);
    for (int64_t l = 0; l < b.layers; ++l) {
      auto w = [&](const char* name) -> const std::vector<double>& {
        return b.at(b.layer(l, std::string("self_attn.") + name + ".weight"));
      };
      // q[p] [H, qk] and k[p] [H, qk] rotated; val[p] [H, v].
      std::vector<std::vector<double>> q(P), k(P), val(P);
      for (int64_t p = 0; p < P; ++p) {
        auto h = x[p];
        b.rmsnorm(h, b.at(b.layer(l, "input_layernorm.weight")), D);
        if (q_lora_rank > 0) {
          auto lat = qwen3_reference::matvec(w("q_a_proj"), h, q_lora_rank);
          b.rmsnorm(lat, w("q_a_layernorm"), q_lora_rank);
          q[p] = qwen3_reference::matvec(w("q_b_proj"), lat, H * qk);
        } else {
          q[p] = qwen3_reference::matvec(w("q_proj"), h, H * qk);
        }
        auto ckv = qwen3_reference::matvec(w("kv_a_proj_with_mqa"), h,
                                           kv_lora_rank + rope);
        std::vector<double> c(ckv.begin(), ckv.begin() + kv_lora_rank);
        std::vector<double> k_pe(ckv.begin() + kv_lora_rank, ckv.end());
        b.rmsnorm(c, w("kv_a_layernorm"), kv_lora_rank);
        const auto kv = qwen3_reference::matvec(w("kv_b_proj"), c, H * per);
        rotate(k_pe.data(), p);
        k[p].assign(H * qk, 0.0);
        val[p].assign(H * v, 0.0);
        for (int64_t hh = 0; hh < H; ++hh) {
          rotate(q[p].data() + hh * qk + nope, p);
          for (int64_t i = 0; i < nope; ++i)
            k[p][hh * qk + i] = kv[hh * per + i];
          for (int64_t i = 0; i < rope; ++i)
            k[p][hh * qk + nope + i] = k_pe[i];
          for (int64_t i = 0; i < v; ++i)
            val[p][hh * v + i] = kv[hh * per + nope + i];
        }
      }
      for (int64_t p = 0; p < P; ++p) {
        std::vector<double> attn(H * v, 0.0);
        for (int64_t hh = 0; hh < H; ++hh) {
          std::vector<double> s(p + 1);
          for (int64_t j = 0; j <= p; ++j) {
            double acc = 0;
            for (int64_t i = 0; i < qk; ++i)
              acc += q[p][hh * qk + i] * k[j][hh * qk + i];
            s[j] = acc / std::sqrt(double(qk));
          }
          const double mx = *std::max_element(s.begin(), s.end());
          double z = 0;
          for (auto& e : s)
            z += e = std::exp(e - mx);
          for (int64_t j = 0; j <= p; ++j)
            for (int64_t i = 0; i < v; ++i)
              attn[hh * v + i] += s[j] / z * val[j][hh * v + i];
        }
        const auto o = qwen3_reference::matvec(w("o_proj"), attn, D);
        for (int64_t d = 0; d < D; ++d)
          x[p][d] += o[d];
        auto h = x[p];
        b.rmsnorm(h, b.at(b.layer(l, "post_attention_layernorm.weight")), D);
        const auto m = b.feed_forward(l, h);
        for (int64_t d = 0; d < D; ++d)
          x[p][d] += m[d];
      }
    }
    std::vector<std::vector<double>> out(P);
    for (int64_t p = 0; p < P; ++p) {
      b.rmsnorm(x[p], b.at("model.norm.weight"), D);
      out[p] = qwen3_reference::matvec(b.at("lm_head.weight"), x[p], b.vocab);
    }
    return out;
  }
};

} // namespace tutti::testing
