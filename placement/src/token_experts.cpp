#include "tutti/placement/token_experts.hpp"

#include <algorithm>
#include <cmath>

#include "tutti/model/tensor_names.hpp"

namespace tutti::placement {

namespace {

using vec = std::vector<double>;

// y = rmsnorm(x) * w, as the model's kernel (double accumulation).
vec rms_norm(const vec& x, std::span<const float> w, double eps) {
  double ss = 0;
  for (double v : x)
    ss += v * v;
  const double r = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  vec y(x.size());
  for (size_t j = 0; j < x.size(); ++j)
    y[j] = x[j] * r * double(w[j]);
  return y;
}

// m [rows][x.size()] times x.
vec mat_vec(std::span<const float> m, const vec& x) {
  const size_t cols = x.size(), rows = m.size() / cols;
  vec out(rows, 0.0);
  for (size_t i = 0; i < rows; ++i) {
    double acc = 0;
    for (size_t j = 0; j < cols; ++j)
      acc += double(m[i * cols + j]) * x[j];
    out[i] = acc;
  }
  return out;
}

} // namespace

expected<std::vector<int32_t>> experts_per_token(const token_model& m) {
  const int64_t d = m.hidden, hd = m.heads > 0 ? d / m.heads : 0;
  if (m.top_k < 1 || m.top_k > m.experts || m.kv_heads < 1
      || m.heads % m.kv_heads != 0 || hd * m.heads != d)
    return status::error("experts_per_token: bad model shape");
  // Every tensor, checked for its size once.
  auto get = [&](const std::string& name, int64_t size,
                 bool optional = false) -> expected<std::span<const float>> {
    auto t = m.tensor(name);
    if (t.empty() && optional)
      return t;
    if (int64_t(t.size()) != size)
      return status::error(name + ": "
                           + (t.empty() ? std::string("missing")
                                        : std::to_string(t.size())
                                            + " values, expected "
                                            + std::to_string(size)));
    return t;
  };
  struct layer {
    std::span<const float> in_norm, v, o, post_norm, gate, bias;
    std::vector<std::span<const float>> w1, w2, w3;
  };
  namespace names = model::names;
  auto embed = get(names::embed, m.vocab * d);
  if (!embed)
    return embed.error();
  std::vector<layer> layers(size_t(m.layers));
  const int64_t f = m.intermediate, kv = m.kv_heads * hd;
  for (int64_t l = 0; l < m.layers; ++l) {
    auto& L = layers[size_t(l)];
    for (auto [what, to, size, optional] :
         {std::tuple{names::input_norm, &L.in_norm, d, false},
          std::tuple{names::v_proj, &L.v, kv * d, false},
          std::tuple{names::o_proj, &L.o, d * d, false},
          std::tuple{names::post_norm, &L.post_norm, d, false},
          std::tuple{names::router, &L.gate, m.experts * d, false},
          std::tuple{names::router_bias, &L.bias, m.experts, true}}) {
      auto t = get(names::layer(l, what), size, optional);
      if (!t)
        return t.error();
      *to = *t;
    }
    for (int64_t e = 0; e < m.experts; ++e) {
      for (auto [which, to, size] :
           {std::tuple{"w1", &L.w1, f * d}, std::tuple{"w2", &L.w2, d * f},
            std::tuple{"w3", &L.w3, f * d}}) {
        auto t = get(names::expert(l, e, which), size);
        if (!t)
          return t.error();
        to->push_back(*t);
      }
    }
  }

  std::vector<int32_t> out;
  out.reserve(size_t(m.vocab * m.layers * m.top_k));
  const int64_t group = m.heads / m.kv_heads;
  for (int64_t token = 0; token < m.vocab; ++token) {
    vec x(embed->begin() + token * d, embed->begin() + (token + 1) * d);
    for (const auto& L : layers) {
      // Attention over one position: each query head reads its key-value
      // head's value.
      const vec v = mat_vec(L.v, rms_norm(x, L.in_norm, m.rms_norm_eps));
      vec heads(static_cast<size_t>(d));
      for (int64_t q = 0; q < m.heads; ++q)
        for (int64_t j = 0; j < hd; ++j)
          heads[q * hd + j] = v[(q / group) * hd + j];
      const vec attn = mat_vec(L.o, heads);
      for (int64_t j = 0; j < d; ++j)
        x[j] = double(float(x[j] + attn[j]));
      const vec xn = rms_norm(x, L.post_norm, m.rms_norm_eps);
      const vec logits = mat_vec(L.gate, xn);
      // Top-k by logit + bias; gates are the softmax of the chosen logits.
      std::vector<char> taken(size_t(m.experts), 0);
      std::vector<int64_t> chosen;
      for (int64_t slot = 0; slot < m.top_k; ++slot) {
        int64_t best = -1;
        double best_score = 0;
        for (int64_t e = 0; e < m.experts; ++e) {
          const double sc = logits[e] + (L.bias.empty() ? 0.0 : L.bias[e]);
          if (!taken[e] && (best < 0 || sc > best_score))
            best = e, best_score = sc;
        }
        taken[best] = 1;
        chosen.push_back(best);
        out.push_back(int32_t(best));
      }
      double top = -INFINITY, sum = 0;
      for (auto e : chosen)
        top = std::max(top, logits[e] / m.router_temperature);
      vec gate;
      for (auto e : chosen)
        sum += gate.emplace_back(
          std::exp(logits[e] / m.router_temperature - top));
      // The experts' SwiGLU, summed by gate into the residual.
      vec moe(static_cast<size_t>(d), 0.0);
      for (size_t j = 0; j < chosen.size(); ++j) {
        const auto e = size_t(chosen[j]);
        const vec g = mat_vec(L.w1[e], xn), u = mat_vec(L.w3[e], xn);
        vec h(static_cast<size_t>(f));
        for (int64_t i = 0; i < f; ++i)
          h[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
        const vec y = mat_vec(L.w2[e], h);
        for (int64_t i = 0; i < d; ++i)
          moe[i] += gate[j] / sum * y[i];
      }
      for (int64_t j = 0; j < d; ++j)
        x[j] = double(float(x[j] + moe[j]));
    }
  }
  return out;
}

} // namespace tutti::placement
