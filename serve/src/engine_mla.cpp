// The serving forward's multi-head latent attention (DeepSeek-V3's MLA)
// over the latent KV cache: a position's cache row in a layer is its
// RMSNormed latent c and its rotated key k_pe (kv_lora_rank +
// qk_rope_head_dim values for all heads), not per-head keys and values.
// The attention is absorbed: a head's unrotated query goes through
// kv_b_proj's key half into a latent query, so its score on position j is
// (q_latent . c_j + q_pe . k_pe_j) / sqrt(qk_head_dim), which equals
// q . k_j; the softmax-weighted sum of the c_j then goes through
// kv_b_proj's value half, which equals the weighted sum of the values.
// Every row is computed on its own in a fixed order (invariant_dot,
// packed_gemm): the same bits in any batch.

#include <algorithm>
#include <cmath>

#include "tutti/kernels/invariant_ops.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/serve/engine.hpp"

namespace tutti::serve {

namespace k = tutti::kernels;

namespace {

// The rotated slice (`rope` values at `src`) into `dst`, de-interleaved
// (x[0::2] then x[1::2]) when the model interleaves, as Hugging Face does
// before rotate_half.
void take_rotated(const float* src, int64_t rope, bool interleave, float* dst) {
  if (!interleave) {
    std::copy_n(src, rope, dst);
    return;
  }
  for (int64_t i = 0; i < rope / 2; ++i) {
    dst[i] = src[2 * i];
    dst[rope / 2 + i] = src[2 * i + 1];
  }
}

} // namespace

void engine::mla_attention(int64_t l, const std::vector<seq_chunk>& batch) {
  const auto& s = model_.shape;
  const auto& w = model_.layers[l];
  const int64_t rows = static_cast<int64_t>(ids_.size()), D = s.hidden;
  const int64_t H = s.q_heads, nope = s.qk_nope_head_dim;
  const int64_t rope = s.qk_rope_head_dim, vd = s.v_head_dim;
  const int64_t qk = s.qk_head_dim(), kvl = s.kv_lora_rank;
  const int64_t ql = s.q_lora_rank, lat = kvl + rope, per = nope + vd;
  const auto cpu = k::cpu_stream();
  const auto eps = static_cast<float>(s.rms_norm_eps);
  head_rstd_.resize(rows);
  q_.resize(rows * H * qk);
  if (ql > 0) {
    q_lat_.resize(rows * ql);
    kernels::packed_gemm(xn_.data(), w.q_a_t, q_lat_.data(), rows);
    k::rmsnorm_forward(cpu, q_lat_.data(), w.q_a_norm.data(), q_lat_.data(),
                       head_rstd_.data(), rows, ql, eps);
    kernels::packed_gemm(q_lat_.data(), w.q_b_t, q_.data(), rows);
  } else {
    kernels::packed_gemm(xn_.data(), w.q_t, q_.data(), rows);
  }
  latent_.resize(rows * lat);
  kernels::packed_gemm(xn_.data(), w.kv_a_t, latent_.data(), rows);
  for (int64_t r = 0; r < rows; ++r)
    k::rmsnorm_forward(cpu, latent_.data() + r * lat, w.kv_a_norm.data(),
                       latent_.data() + r * lat, head_rstd_.data() + r,
                       int64_t{1}, kvl, eps);
  // The rotated parts: the queries' per head, the one key per row (back
  // into its latent row, which is what the cache keeps).
  q_pe_.resize(rows * H * rope);
  k_.resize(rows * rope);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < H; ++h)
      take_rotated(q_.data() + (r * H + h) * qk + nope, rope, s.rope_interleave,
                   q_pe_.data() + (r * H + h) * rope);
    take_rotated(latent_.data() + r * lat + kvl, rope, s.rope_interleave,
                 k_.data() + r * rope);
  }
  kernels::rope_at_positions(q_pe_.data(), H, k_.data(), 1, pos_.data(), rows,
                             rope, s.rope_theta);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(k_.data() + r * rope, rope, latent_.data() + r * lat + kvl);

  const int64_t bt = cache_.geometry().block_tokens;
  // The new rows' latents go in first: a row attends to the earlier rows
  // of its own chunk through the cache, like a decode step.
  int64_t row = 0;
  for (const auto& c : batch) {
    for (int64_t i = 0; i < c.count; ++i) {
      const int64_t p = c.start + i;
      std::copy_n(latent_.data() + (row + i) * lat, lat,
                  cache_.key((*c.blocks)[p / bt], l, p % bt));
    }
    row += c.count;
  }
  // Each head's unrotated query through kv_b_proj's key half.
  q_absorbed_.resize(rows * H * kvl);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < kvl; ++c)
        q_absorbed_[(r * H + h) * kvl + c] = kernels::invariant_dot(
          w.kv_b_key_t.data() + (h * kvl + c) * nope,
          q_.data() + (r * H + h) * qk, nope);

  const float scale = static_cast<float>(1.0 / std::sqrt(double(qk)));
  attn_.resize(rows * H * vd);
  v_.resize(H * kvl); // one row's weighted latents, per head
  row = 0;
  for (const auto& c : batch) {
    for (int64_t i = 0; i < c.count; ++i) {
      const int64_t p = c.start + i, r = row + i, n = p + 1;
      scores_.resize(H * n);
      for (int64_t j0 = 0; j0 < n; j0 += bt) {
        const float* block = cache_.key((*c.blocks)[j0 / bt], l, 0);
        for (int64_t j = j0; j < std::min(n, j0 + bt); ++j) {
          const float* cj = block + (j - j0) * lat;
          for (int64_t h = 0; h < H; ++h)
            scores_[h * n + j] =
              (kernels::invariant_dot(q_absorbed_.data() + (r * H + h) * kvl,
                                      cj, kvl)
               + kernels::invariant_dot(q_pe_.data() + (r * H + h) * rope,
                                        cj + kvl, rope))
              * scale;
        }
      }
      // Softmax weights and the weighted latents in float, position by
      // position in order.
      sums_.resize(H);
      kernels::invariant_softmax_numerators(scores_.data(), H, n, n,
                                            sums_.data());
      std::fill(v_.begin(), v_.end(), 0.0f);
      for (int64_t j0 = 0; j0 < n; j0 += bt) {
        kernels::invariant_weighted_values(
          scores_.data() + j0, n, H, cache_.key((*c.blocks)[j0 / bt], l, 0),
          lat, std::min(n, j0 + bt) - j0, kvl, v_.data());
      }
      // Through kv_b_proj's value half: the head's values.
      for (int64_t h = 0; h < H; ++h) {
        float* o = v_.data() + h * kvl;
        const float inv = 1.0f / sums_[h];
        for (int64_t c2 = 0; c2 < kvl; ++c2)
          o[c2] *= inv;
        for (int64_t d = 0; d < vd; ++d)
          attn_[(r * H + h) * vd + d] = kernels::invariant_dot(
            w.kv_b.data() + (h * per + nope + d) * kvl, o, kvl);
      }
    }
    row += c.count;
  }
  tmp_.resize(rows * D);
  kernels::packed_gemm(attn_.data(), w.o_t, tmp_.data(), rows);
  for (int64_t i = 0; i < rows * D; ++i)
    x_[i] += tmp_[i];
}

} // namespace tutti::serve
