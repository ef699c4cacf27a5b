#include "tutti/serve/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tutti/kernels/ops.hpp"
#include "tutti/kernels/invariant_ops.hpp"

namespace tutti::serve {

namespace k = tutti::kernels;

namespace {

// Asks for `floats` from p into the caches, a line at a time.
void prefetch(const float* p, int64_t floats) {
  for (int64_t i = 0; i < floats; i += 16)
    __builtin_prefetch(p + i);
}

} // namespace

engine::engine(const served_model& model, kv_cache& cache)
  : model_(model), cache_(cache),
    activations_(model.shape.layers * model.shape.experts, 0) {}

engine::engine(const served_model& model, kv_cache& cache,
               expert_exchange* experts)
  : engine(model, cache) {
  experts_ = experts;
}

status engine::forward(const std::vector<seq_chunk>& batch,
                       std::vector<float>& logits) {
  const auto& s = model_.shape;
  const int64_t D = s.hidden;
  ids_.clear();
  pos_.clear();
  for (const auto& c : batch) {
    if (c.count <= 0)
      return status::error("engine: empty chunk");
    if (c.start + c.count > s.max_positions)
      return status::error(
        "engine: position " + std::to_string(c.start + c.count - 1)
        + " past max_position_embeddings " + std::to_string(s.max_positions));
    if (!c.blocks
        || static_cast<int64_t>(c.blocks->size())
             < cache_.blocks_for_tokens(c.start + c.count))
      return status::error("engine: block table too short");
    for (int64_t i = 0; i < c.count; ++i) {
      if (c.tokens[i] < 0 || c.tokens[i] >= s.vocab)
        return status::error("engine: token " + std::to_string(c.tokens[i])
                             + " outside the vocabulary");
      ids_.push_back(c.tokens[i]);
      pos_.push_back(c.start + i);
    }
  }
  const int64_t rows = static_cast<int64_t>(ids_.size());
  if (rows == 0) {
    // Nothing of its own this step: the rank still serves its peers' rows.
    logits.clear();
    for (int64_t l = s.dense_layers; l < s.layers && experts_; ++l)
      TUTTI_RETURN_IF_ERROR(experts_->run(l, nullptr, nullptr, 0, nullptr));
    return {};
  }
  const auto cpu = k::cpu_stream();
  x_.resize(rows * D);
  xn_.resize(rows * D);
  rstd_.resize(rows);
  k::embedding_forward(cpu, ids_.data(), model_.embed.data(), x_.data(), rows,
                       D);
  const float eps = static_cast<float>(s.rms_norm_eps);
  for (int64_t l = 0; l < s.layers; ++l) {
    const auto& w = model_.layers[l];
    k::rmsnorm_forward(cpu, x_.data(), w.input_norm.data(), xn_.data(),
                       rstd_.data(), rows, D, eps);
    if (s.mla())
      mla_attention(l, batch);
    else
      attention(l, batch);
    k::rmsnorm_forward(cpu, x_.data(), w.post_norm.data(), xn_.data(),
                       rstd_.data(), rows, D, eps);
    TUTTI_RETURN_IF_ERROR(moe(l, rows));
  }
  // Final norm and LM head on the rows whose logits are wanted.
  std::vector<int64_t> wanted;
  int64_t row = 0;
  for (const auto& c : batch) {
    if (c.want == seq_chunk::logits::all)
      for (int64_t i = 0; i < c.count; ++i)
        wanted.push_back(row + i);
    else if (c.want == seq_chunk::logits::last)
      wanted.push_back(row + c.count - 1);
    row += c.count;
  }
  const int64_t n = static_cast<int64_t>(wanted.size());
  tmp_.resize(n * D);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(x_.data() + wanted[i] * D, D, tmp_.data() + i * D);
  xn_.resize(std::max<int64_t>(n, rows) * D);
  k::rmsnorm_forward(cpu, tmp_.data(), model_.final_norm.data(), xn_.data(),
                     rstd_.data(), n, D, eps);
  logits.resize(n * s.vocab);
  kernels::packed_gemm(xn_.data(), model_.lm_head_t, logits.data(), n);
  return {};
}

// x += o_proj(attention(rope(q), cache keys, cache values)) on xn_.
void engine::attention(int64_t l, const std::vector<seq_chunk>& batch) {
  const auto& s = model_.shape;
  const auto& w = model_.layers[l];
  const int64_t rows = static_cast<int64_t>(ids_.size()), D = s.hidden;
  const int64_t hd = s.head_dim, hq = s.q_heads, hkv = s.kv_heads;
  const int64_t group = hq / hkv;
  q_.resize(rows * hq * hd);
  k_.resize(rows * hkv * hd);
  v_.resize(rows * hkv * hd);
  attn_.resize(rows * hq * hd);
  tmp_.resize(rows * D);
  kernels::packed_gemm(xn_.data(), w.q_t, q_.data(), rows);
  kernels::packed_gemm(xn_.data(), w.k_t, k_.data(), rows);
  kernels::packed_gemm(xn_.data(), w.v_t, v_.data(), rows);
  if (s.qk_norm) {
    // Each head's row on its own: the same bits in any batch.
    const auto eps = static_cast<float>(s.rms_norm_eps);
    const auto cpu = k::cpu_stream();
    head_rstd_.resize(rows * hq);
    k::rmsnorm_forward(cpu, q_.data(), w.q_norm.data(), q_.data(),
                       head_rstd_.data(), rows * hq, hd, eps);
    k::rmsnorm_forward(cpu, k_.data(), w.k_norm.data(), k_.data(),
                       head_rstd_.data(), rows * hkv, hd, eps);
  }
  kernels::rope_at_positions(q_.data(), hq, k_.data(), hkv, pos_.data(), rows,
                             hd, s.rope_theta);

  const int64_t bt = cache_.geometry().block_tokens;
  // Keys and values of the new rows go in first: a row attends to the
  // earlier rows of its own chunk through the cache, like a decode step.
  int64_t row = 0;
  for (const auto& c : batch) {
    for (int64_t i = 0; i < c.count; ++i) {
      const int64_t p = c.start + i;
      const int32_t block = (*c.blocks)[p / bt];
      std::copy_n(k_.data() + (row + i) * hkv * hd, hkv * hd,
                  cache_.key(block, l, p % bt));
      std::copy_n(v_.data() + (row + i) * hkv * hd, hkv * hd,
                  cache_.value(block, l, p % bt));
    }
    row += c.count;
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
  const int64_t kv_row = hkv * hd; // a position's keys in a block
  row = 0;
  for (const auto& c : batch) {
    for (int64_t i = 0; i < c.count; ++i) {
      const int64_t p = c.start + i, r = row + i, n = p + 1;
      // A block of the cache at a time, every KV head's `group` query
      // heads in one pass over its rows (the cache's rows hold all KV
      // heads side by side). scores_[h * n + j], h over the query heads.
      scores_.resize(hq * n);
      const float* q0 = q_.data() + r * hq * hd;
      float* o0 = attn_.data() + r * hq * hd;
      // A block's keys and then its values, 2 * bt rows, are asked for
      // two blocks ahead of the scoring (the first two at once): each
      // block would otherwise start the prefetchers' stream cold.
      for (int64_t j0 = 0; j0 < std::min(n, 2 * bt); j0 += bt)
        prefetch(cache_.key((*c.blocks)[j0 / bt], l, 0), 2 * bt * kv_row);
      for (int64_t j0 = 0; j0 < n; j0 += bt) {
        const float* keys = cache_.key((*c.blocks)[j0 / bt], l, 0);
        const int64_t count = std::min(n, j0 + bt) - j0;
        if (j0 + 2 * bt < n)
          prefetch(cache_.key((*c.blocks)[j0 / bt + 2], l, 0), 2 * bt * kv_row);
        for (int64_t g = 0; g < hkv; ++g)
          kernels::invariant_scores(q0 + g * group * hd, group, hd,
                                    keys + g * hd, kv_row, count, scale,
                                    scores_.data() + g * group * n + j0, n);
      }
      // Softmax weights and the weighted values in float, position by
      // position in order (the same for a sequence in any batch).
      sums_.resize(hq);
      kernels::invariant_softmax_numerators(scores_.data(), hq, n, n,
                                            sums_.data());
      std::fill(o0, o0 + hq * hd, 0.0f);
      for (int64_t j0 = 0; j0 < n; j0 += bt) {
        const float* values = cache_.value((*c.blocks)[j0 / bt], l, 0);
        const int64_t count = std::min(n, j0 + bt) - j0;
        for (int64_t g = 0; g < hkv; ++g)
          kernels::invariant_weighted_values(
            scores_.data() + g * group * n + j0, n, group, values + g * hd,
            kv_row, count, hd, o0 + g * group * hd);
      }
      for (int64_t h = 0; h < hq; ++h) {
        const float inv = 1.0f / sums_[h];
        for (int64_t d = 0; d < hd; ++d)
          o0[h * hd + d] *= inv;
      }
    }
    row += c.count;
  }
  kernels::packed_gemm(attn_.data(), w.o_t, tmp_.data(), rows);
  for (int64_t i = 0; i < rows * D; ++i)
    x_[i] += tmp_[i];
}

// x += sum over the chosen experts of gate * SwiGLU expert(xn_), plus the
// shared experts' SwiGLU MLP of xn_; in a leading dense layer x += its
// MLP of xn_ alone. The MLP runs here, on every EP rank for its own rows,
// through the experts' batch-invariant kernel.
status engine::moe(int64_t l, int64_t rows) {
  const auto& s = model_.shape;
  const auto& w = model_.layers[l];
  const int64_t D = s.hidden, E = s.experts;
  const int64_t K = s.top_k;
  const bool mlp = !w.mlp_w1.empty();
  if (mlp) {
    mlp_out_.resize(rows * D);
    kernels::invariant_expert(xn_.data(), w.mlp_w13_t, w.mlp_w2_t,
                              mlp_out_.data(), rows, a_, h_);
  }
  if (s.dense_layer(l)) {
    for (int64_t i = 0; i < rows * D; ++i)
      x_[i] += mlp_out_[i];
    return {};
  }
  const auto cpu = k::cpu_stream();
  router_.resize(rows * E);
  topk_.resize(rows * K);
  gate_.resize(rows * K);
  kernels::packed_gemm(xn_.data(), w.router_t, router_.data(), rows);
  if (s.scoring == scoring_func::sigmoid) {
    k::router_sigmoid_forward<float>(cpu, router_.data(), w.router_bias.data(),
                                     topk_.data(), gate_.data(), rows, E, K,
                                     s.n_group, s.topk_group, s.norm_topk_prob,
                                     s.routed_scaling_factor);
  } else {
    probs_.resize(s.norm_topk_prob ? 0 : rows * E);
    float* probs = s.norm_topk_prob ? nullptr : probs_.data();
    k::router_topk_forward<float>(cpu, router_.data(), w.router_bias.data(),
                                  topk_.data(), gate_.data(), probs, rows, E, K,
                                  static_cast<float>(s.router_temperature));
    if (probs)
      k::router_gates_from_probs<float>(cpu, topk_.data(), probs, gate_.data(),
                                        rows, E, K);
  }
  // Each expert's rows in token order, through its SwiGLU FFN; outputs kept
  // per (token, slot) and summed per token in slot order.
  moe_out_.assign(rows * K * D, 0.0f);
  for (int64_t t = 0; t < rows * K; ++t)
    ++activations_[l * E + topk_[t]];
  if (experts_)
    TUTTI_RETURN_IF_ERROR(
      experts_->run(l, xn_.data(), topk_.data(), rows, moe_out_.data()));
  std::vector<int64_t> slots;
  for (int64_t e = 0; e < E && !experts_; ++e) {
    slots.clear();
    for (int64_t t = 0; t < rows * K; ++t)
      if (topk_[t] == e)
        slots.push_back(t);
    const int64_t m = static_cast<int64_t>(slots.size());
    if (m == 0)
      continue;
    xe_.resize(m * D);
    ye_.resize(m * D);
    for (int64_t i = 0; i < m; ++i)
      std::copy_n(xn_.data() + (slots[i] / K) * D, D, xe_.data() + i * D);
    kernels::invariant_expert(xe_.data(), w.w13_t[e], w.w2_t[e], ye_.data(), m,
                              a_, h_);
    for (int64_t i = 0; i < m; ++i)
      std::copy_n(ye_.data() + i * D, D, moe_out_.data() + slots[i] * D);
  }
  for (int64_t t = 0; t < rows; ++t) {
    float* xt = x_.data() + t * D;
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j)
        acc += gate_[t * K + j] * moe_out_[(t * K + j) * D + d];
      // As training adds them: the routed sum, then the shared output.
      if (mlp)
        acc += mlp_out_[t * D + d];
      xt[d] += acc;
    }
  }
  return {};
}

} // namespace tutti::serve
