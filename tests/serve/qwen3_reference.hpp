#pragma once
// An independent float64 forward of Hugging Face's Qwen3MoeForCausalLM
// (modeling_qwen3_moe.py), written from the published architecture over
// the checkpoint's own tensor names: RMSNorm, q/k/v projections without
// bias, q_norm and k_norm (RMSNorm over each head's head_dim values) before
// the rotary embedding (rotate_half), causal grouped-query attention scaled
// by 1/sqrt(head_dim), o_proj; the router's softmax over all experts, top-k,
// renormalised when norm_topk_prob; SwiGLU experts down(silu(gate(x)) *
// up(x)); the final norm and the untied LM head. No tutti code.
// Optionally DeepSeek-V3's router in place of the softmax (HF's
// DeepseekV3TopkRouter): sigmoid scores, choice on scores + the
// checkpoint's e_score_correction_bias within the topk_group groups whose
// two best biased scores sum highest, gates the unbiased scores (over their
// sum when norm_topk_prob) times routed_scaling_factor. Optionally
// DeepSeek-V3's feed-forward side (DeepseekV3MoE, DeepseekV3MLP): the
// first first_k_dense_replace layers a SwiGLU MLP mlp.{gate,up,down}_proj
// of width dense_inter in place of router and experts, and
// mlp.shared_experts, a SwiGLU MLP of width inter * n_shared_experts on
// every token, added to the routed experts' output.

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace tutti::testing {

struct qwen3_reference {
  int64_t vocab, hidden, inter, layers, heads, kv_heads, head_dim, experts,
    top_k;
  bool norm_topk_prob;
  double rope_theta, eps;
  std::map<std::string, std::vector<double>> w; // by Hugging Face name
  struct deepseek_router {
    int64_t n_group = 1, topk_group = 1;
    double routed_scaling_factor = 1.0;
  };
  std::optional<deepseek_router> sigmoid_router = std::nullopt;
  int64_t n_shared_experts = 0, first_k_dense_replace = 0, dense_inter = 0;

  const std::vector<double>& at(const std::string& name) const {
    return w.at(name);
  }
  std::string layer(int64_t l, const std::string& what) const {
    return "model.layers." + std::to_string(l) + "." + what;
  }

  // y[out] = W[out, in] x[in]
  static std::vector<double> matvec(const std::vector<double>& W,
                                    const std::vector<double>& x, int64_t out) {
    const int64_t in = static_cast<int64_t>(x.size());
    std::vector<double> y(out, 0.0);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        y[o] += W[o * in + i] * x[i];
    return y;
  }

  // RMSNorm of x's rows of `dim` values, in place.
  void rmsnorm(std::vector<double>& x, const std::vector<double>& g,
               int64_t dim) const {
    for (size_t r = 0; r < x.size(); r += dim) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i)
        ss += x[r + i] * x[r + i];
      const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
      for (int64_t i = 0; i < dim; ++i)
        x[r + i] = x[r + i] * inv * g[i];
    }
  }

  // rotate_half on each head at position p.
  void rope(std::vector<double>& x, int64_t p) const {
    const int64_t half = head_dim / 2;
    for (size_t h = 0; h < x.size(); h += head_dim)
      for (int64_t i = 0; i < half; ++i) {
        const double f = double(p)
                         * std::pow(rope_theta,
                                    -2.0 * double(i) / double(head_dim));
        const double a = x[h + i], b = x[h + i + half];
        x[h + i] = a * std::cos(f) - b * std::sin(f);
        x[h + i + half] = b * std::cos(f) + a * std::sin(f);
      }
  }

  // Indices of v best-first, ties to the lower index.
  static std::vector<int64_t> ranked(const std::vector<double>& v) {
    std::vector<int64_t> order(v.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return v[a] > v[b]; });
    return order;
  }

  // The chosen experts and their gates, by DeepSeek-V3's router.
  std::vector<std::pair<int64_t, double>> sigmoid_route(
    int64_t l, const std::vector<double>& logits) const {
    const auto& r = *sigmoid_router;
    const auto& bias = at(layer(l, "mlp.gate.e_score_correction_bias"));
    const int64_t per = experts / r.n_group;
    std::vector<double> score(experts), choice(experts), group(r.n_group);
    for (int64_t e = 0; e < experts; ++e) {
      score[e] = 1.0 / (1.0 + std::exp(-logits[e]));
      choice[e] = score[e] + bias[e];
    }
    for (int64_t g = 0; g < r.n_group; ++g) {
      std::vector<double> m(choice.begin() + g * per,
                            choice.begin() + (g + 1) * per);
      std::sort(m.rbegin(), m.rend());
      group[g] = m[0] + (per > 1 ? m[1] : 0.0);
    }
    const auto groups = ranked(group);
    std::vector<bool> kept(r.n_group, false);
    for (int64_t i = 0; i < r.topk_group; ++i)
      kept[groups[i]] = true;
    for (int64_t e = 0; e < experts; ++e)
      if (!kept[e / per])
        choice[e] = -INFINITY;
    const auto order = ranked(choice);
    double sum = 0;
    for (int64_t j = 0; j < top_k; ++j)
      sum += score[order[j]];
    std::vector<std::pair<int64_t, double>> out;
    for (int64_t j = 0; j < top_k; ++j) {
      const double s = score[order[j]];
      out.push_back({order[j], (norm_topk_prob ? s / (sum + 1e-20) : s)
                                 * r.routed_scaling_factor});
    }
    return out;
  }

  std::vector<double> moe(int64_t l, const std::vector<double>& x) const {
    auto logits = matvec(at(layer(l, "mlp.gate.weight")), x, experts);
    if (sigmoid_router)
      return mix(l, x, sigmoid_route(l, logits));
    const double mx = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(experts);
    double z = 0;
    for (int64_t e = 0; e < experts; ++e)
      z += p[e] = std::exp(logits[e] - mx);
    for (auto& v : p)
      v /= z;
    const auto order = ranked(p);
    double chosen = 0;
    for (int64_t j = 0; j < top_k; ++j)
      chosen += p[order[j]];
    std::vector<std::pair<int64_t, double>> routes;
    for (int64_t j = 0; j < top_k; ++j)
      routes.push_back(
        {order[j], norm_topk_prob ? p[order[j]] / chosen : p[order[j]]});
    return mix(l, x, routes);
  }

  // down(silu(gate(x)) * up(x)) of the MLP whose weights are `prefix` +
  // gate_proj / up_proj / down_proj.
  std::vector<double> swiglu(const std::string& prefix,
                             const std::vector<double>& x,
                             int64_t width) const {
    auto gate = matvec(at(prefix + "gate_proj.weight"), x, width);
    const auto up = matvec(at(prefix + "up_proj.weight"), x, width);
    for (int64_t i = 0; i < width; ++i)
      gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    return matvec(at(prefix + "down_proj.weight"), gate, hidden);
  }

  // A layer's feed-forward output: a dense layer's MLP, or the routed
  // experts' plus the shared experts'.
  std::vector<double> feed_forward(int64_t l,
                                   const std::vector<double>& x) const {
    if (l < first_k_dense_replace)
      return swiglu(layer(l, "mlp."), x, dense_inter);
    auto out = moe(l, x);
    if (n_shared_experts > 0) {
      const auto shared = swiglu(layer(l, "mlp.shared_experts."), x,
                                 inter * n_shared_experts);
      for (int64_t d = 0; d < hidden; ++d)
        out[d] += shared[d];
    }
    return out;
  }

  // sum over the routes (expert, gate) of gate * SwiGLU expert(x).
  std::vector<double> mix(
    int64_t l, const std::vector<double>& x,
    const std::vector<std::pair<int64_t, double>>& routes) const {
    std::vector<double> out(hidden, 0.0);
    for (const auto& [e, g] : routes) {
      const auto pre = layer(l, "mlp.experts." + std::to_string(e) + ".");
      auto gate = matvec(at(pre + "gate_proj.weight"), x, inter);
      auto up = matvec(at(pre + "up_proj.weight"), x, inter);
      for (int64_t i = 0; i < inter; ++i)
        gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const auto down = matvec(at(pre + "down_proj.weight"), gate, hidden);
      for (int64_t d = 0; d < hidden; ++d)
        out[d] += g * down[d];
    }
    return out;
  }

  // The logits [position][vocab] of a sequence.
  std::vector<std::vector<double>> logits(
    const std::vector<int32_t>& tokens) const {
    const int64_t P = static_cast<int64_t>(tokens.size());
    const int64_t group = heads / kv_heads;
    std::vector<std::vector<double>> x(P);
    const auto& embed = at("model.embed_tokens.weight");
    for (int64_t p = 0; p < P; ++p)
      x[p].assign(embed.begin() + tokens[p] * hidden,
                  embed.begin() + (tokens[p] + 1) * hidden);
    for (int64_t l = 0; l < layers; ++l) {
      std::vector<std::vector<double>> q(P), k(P), v(P);
      for (int64_t p = 0; p < P; ++p) {
        auto h = x[p];
        rmsnorm(h, at(layer(l, "input_layernorm.weight")), hidden);
        q[p] = matvec(at(layer(l, "self_attn.q_proj.weight")), h,
                      heads * head_dim);
        k[p] = matvec(at(layer(l, "self_attn.k_proj.weight")), h,
                      kv_heads * head_dim);
        v[p] = matvec(at(layer(l, "self_attn.v_proj.weight")), h,
                      kv_heads * head_dim);
        rmsnorm(q[p], at(layer(l, "self_attn.q_norm.weight")), head_dim);
        rmsnorm(k[p], at(layer(l, "self_attn.k_norm.weight")), head_dim);
        rope(q[p], p);
        rope(k[p], p);
      }
      for (int64_t p = 0; p < P; ++p) {
        std::vector<double> attn(heads * head_dim, 0.0);
        for (int64_t hh = 0; hh < heads; ++hh) {
          const int64_t g = hh / group;
          std::vector<double> s(p + 1);
          for (int64_t j = 0; j <= p; ++j) {
            double acc = 0;
            for (int64_t i = 0; i < head_dim; ++i)
              acc += q[p][hh * head_dim + i] * k[j][g * head_dim + i];
            s[j] = acc / std::sqrt(double(head_dim));
          }
          const double mx = *std::max_element(s.begin(), s.end());
          double z = 0;
          for (auto& e : s)
            z += e = std::exp(e - mx);
          for (int64_t j = 0; j <= p; ++j)
            for (int64_t i = 0; i < head_dim; ++i)
              attn[hh * head_dim + i] += s[j] / z * v[j][g * head_dim + i];
        }
        const auto o = matvec(at(layer(l, "self_attn.o_proj.weight")), attn,
                              hidden);
        for (int64_t d = 0; d < hidden; ++d)
          x[p][d] += o[d];
        auto h = x[p];
        rmsnorm(h, at(layer(l, "post_attention_layernorm.weight")), hidden);
        const auto m = feed_forward(l, h);
        for (int64_t d = 0; d < hidden; ++d)
          x[p][d] += m[d];
      }
    }
    std::vector<std::vector<double>> out(P);
    for (int64_t p = 0; p < P; ++p) {
      rmsnorm(x[p], at("model.norm.weight"), hidden);
      out[p] = matvec(at("lm_head.weight"), x[p], vocab);
    }
    return out;
  }
};

} // namespace tutti::testing
