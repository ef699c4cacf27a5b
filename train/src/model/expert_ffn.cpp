#include "tutti/train/expert_ffn.hpp"

#include <algorithm>
#include <numeric>

#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/idle_core_pool.hpp"

namespace tutti::train {

namespace k = tutti::kernels;

namespace {
// Calls f(expert, first row of the expert, its rows) for every expert with
// rows.
template <class F>
void each_expert(const int64_t* rows, int64_t experts, F&& f) {
  for (int64_t j = 0, at = 0; j < experts; at += rows[j], ++j)
    if (rows[j] > 0)
      f(j, at, rows[j]);
}

// Calls f(first, count) for consecutive tiles of `size` of [0, n).
template <class F>
void each_tile(int64_t n, int64_t size, F&& f) {
  for (int64_t first = 0; first < n; first += size)
    f(first, std::min(size, n - first));
}

} // namespace

bool expert_tiles_for(const job_config& cfg, int device) {
  return device < 0 && cfg.cluster.nproc_per_node > 1;
}

bool shares_expert_tiles(const job_config& cfg, int device) {
  return expert_tiles_for(cfg, device) && cfg.moe.share_idle_cores;
}

expert_ffn::expert_ffn(int64_t layers, int64_t experts, int64_t hidden,
                       int64_t intermediate)
  : layers_(layers), experts_(experts), hidden_(hidden),
    intermediate_(intermediate) {
  use_slot(0);
}

void expert_ffn::use_slot(int64_t slot) {
  slot_ = static_cast<size_t>(slot);
  while (saved_.size() <= slot_)
    saved_.emplace_back(static_cast<size_t>(layers_));
}

void expert_ffn::run_tiles(
  const std::vector<std::function<void()>>& tiles) const {
  if (share_cores_ && tiles.size() > 1) {
    idle_core_pool::process().run(tiles);
    return;
  }
  for (const auto& t : tiles)
    t();
}

void expert_ffn::forward(const k::stream& s, int64_t layer,
                         const expert_block& w, const float* x,
                         const int64_t* rows, float* y, bool append) {
  auto& sv = saved_[slot_][layer];
  const int64_t m = std::accumulate(rows, rows + experts_, int64_t{0});
  const int64_t m0 = append ? static_cast<int64_t>(sv.x.size()) / hidden_
                            : int64_t{0};
  if (!append)
    sv.rows.assign(experts_, 0);
  for (int64_t j = 0; j < experts_; ++j)
    sv.rows[j] += rows[j];
  // Saved activations grow by the chunk (resize keeps what is there).
  sv.x.resize(s, (m0 + m) * hidden_);
  k::copy_on(s, sv.x.data() + m0 * hidden_, x, m * hidden_ * sizeof(float));
  for (auto* t : {&sv.a, &sv.b, &sv.h})
    t->resize(s, (m0 + m) * intermediate_);
  float* a = sv.a.data() + m0 * intermediate_;
  float* b = sv.b.data() + m0 * intermediate_;
  float* h = sv.h.data() + m0 * intermediate_;
  const int64_t D = hidden_, F = intermediate_;
  if (s.device != k::device_kind::cpu) {
    k::grouped_linear_forward(s, x, w.w1, rows, experts_, a, D, F);
    k::grouped_linear_forward(s, x, w.w3, rows, experts_, b, D, F);
    k::swiglu_forward(s, a, b, h, m * F);
    k::grouped_linear_forward(s, h, w.w2, rows, experts_, y, F, D);
    return;
  }
  // A tile is every step of the expert for its rows: rows are independent
  // through the whole SwiGLU FFN. Untiled, a "tile" is a whole expert.
  std::vector<std::function<void()>> tiles;
  each_expert(rows, experts_, [&](int64_t j, int64_t at, int64_t n) {
    each_tile(n, tiles_ ? row_tile : n, [&](int64_t first, int64_t count) {
      const int64_t r = at + first;
      tiles.emplace_back([=] {
        const auto cpu = s; // a CPU stream: its GEMM precision
        k::linear_forward(cpu, x + r * D, w.w1 + j * F * D, a + r * F, count,
                          D, F);
        k::linear_forward(cpu, x + r * D, w.w3 + j * F * D, b + r * F, count,
                          D, F);
        k::swiglu_forward(cpu, a + r * F, b + r * F, h + r * F, count * F);
        k::linear_forward(cpu, h + r * F, w.w2 + j * D * F, y + r * D, count,
                          F, D);
      });
    });
  });
  run_tiles(tiles);
}

void expert_ffn::backward(const k::stream& s, int64_t layer,
                          const expert_block& w, const float* dy, float* dx,
                          const int64_t* rows, int64_t first_row) {
  auto& sv = saved_[slot_][layer];
  if (rows == nullptr) {
    rows = sv.rows.data();
    first_row = 0;
  }
  const int64_t m = std::accumulate(rows, rows + experts_, int64_t{0});
  const int64_t D = hidden_, F = intermediate_;
  const float* x = sv.x.data() + first_row * D;
  const float* a = sv.a.data() + first_row * F;
  const float* b = sv.b.data() + first_row * F;
  const float* h = sv.h.data() + first_row * F;
  dh_.resize(s, m * F);
  da_.resize(s, m * F);
  db_.resize(s, m * F);
  float *dh = dh_.data(), *da = da_.data(), *db = db_.data();
  if (s.device != k::device_kind::cpu) {
    dx_tmp_.resize(s, m * D);
    float* dx2 = dx_tmp_.data();
    k::grouped_linear_backward(s, h, w.w2, dy, rows, experts_, dh, w.dw2, F,
                               D);
    k::swiglu_backward(s, a, b, dh, da, db, m * F);
    k::grouped_linear_backward(s, x, w.w1, da, rows, experts_, dx, w.dw1, D,
                               F);
    k::grouped_linear_backward(s, x, w.w3, db, rows, experts_, dx2, w.dw3, D,
                               F);
    k::axpy(s, 1.0f, dx2, dx, m * D);
    return;
  }
  // First the input gradients, by tiles of rows; then the weight gradients,
  // which sum over all of an expert's rows, by tiles of their own rows.
  std::vector<std::function<void()>> tiles;
  each_expert(rows, experts_, [&](int64_t j, int64_t at, int64_t n) {
    each_tile(n, tiles_ ? row_tile : n, [&](int64_t first, int64_t count) {
      const int64_t r = at + first;
      tiles.emplace_back([=] {
        const auto cpu = s; // a CPU stream: its GEMM precision
        k::linear_input_grad(cpu, w.w2 + j * D * F, dy + r * D, dh + r * F,
                             count, F, D, false);
        k::swiglu_backward(cpu, a + r * F, b + r * F, dh + r * F, da + r * F,
                           db + r * F, count * F);
        // dx = da w1 + db w3, the second product added in the GEMM itself.
        k::linear_input_grad(cpu, w.w1 + j * F * D, da + r * F, dx + r * D,
                             count, D, F, false);
        k::linear_input_grad(cpu, w.w3 + j * F * D, db + r * F, dx + r * D,
                             count, D, F, true);
      });
    });
  });
  run_tiles(tiles);
  tiles.clear();
  each_expert(rows, experts_, [&](int64_t j, int64_t at, int64_t n) {
    each_tile(D, tiles_ ? weight_tile : D, [&](int64_t first, int64_t count) {
      tiles.emplace_back([=] {
        k::linear_weight_grad_rows(s, h + at * F, dy + at * D,
                                   w.dw2 + j * D * F, n, F, D, first, count);
      });
    });
    each_tile(F, tiles_ ? weight_tile : F, [&](int64_t first, int64_t count) {
      tiles.emplace_back([=] {
        const auto cpu = s; // a CPU stream: its GEMM precision
        k::linear_weight_grad_rows(cpu, x + at * D, da + at * F,
                                   w.dw1 + j * F * D, n, D, F, first, count);
        k::linear_weight_grad_rows(cpu, x + at * D, db + at * F,
                                   w.dw3 + j * F * D, n, D, F, first, count);
      });
    });
  });
  run_tiles(tiles);
}

} // namespace tutti::train
