#include "tutti/model/expert_ffn.hpp"

#include <algorithm>
#include <functional>
#include <numeric>

#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/model/idle_core_pool.hpp"

namespace tutti::model {

namespace k = tutti::kernels;

expert_ffn::expert_ffn(int64_t layers, int64_t experts, int64_t hidden,
                       int64_t intermediate)
  : experts_(experts), hidden_(hidden), intermediate_(intermediate),
    saved_(layers) {}

bool expert_ffn::lends_work(const k::stream& s, const int64_t* rows) const {
  // Splits at multiples of 16 floats keep every element of the vectorised
  // SwiGLU and axpy loops in the same lane path as the whole-range call.
  if (!share_cores_ || s.device != k::device_kind::cpu
      || intermediate_ % 16 != 0 || hidden_ % 16 != 0
      || idle_core_pool::process().threads() == 0)
    return false;
  return std::count_if(rows, rows + experts_, [](int64_t r) { return r > 0; })
         > 1;
}

template <class Task>
void expert_ffn::per_expert(const int64_t* rows, Task&& task) const {
  std::vector<int64_t> order, first(experts_);
  for (int64_t j = 0, at = 0; j < experts_; at += rows[j], ++j) {
    first[j] = at;
    if (rows[j] > 0)
      order.push_back(j);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return rows[a] > rows[b]; });
  std::vector<std::function<void()>> tasks;
  for (int64_t j : order)
    tasks.emplace_back([&task, j, at = first[j]] { task(j, at); });
  idle_core_pool::process().run(tasks);
}

void expert_ffn::forward(const k::stream& s, int64_t layer,
                         const expert_block& w, const float* x,
                         const int64_t* rows, float* y, bool append) {
  auto& sv = saved_[layer];
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
  if (lends_work(s, rows)) {
    const int64_t D = hidden_, F = intermediate_;
    per_expert(rows, [&](int64_t j, int64_t r) {
      const int64_t* n = rows + j;
      k::grouped_linear_forward(s, x + r * D, w.w1 + j * F * D, n, 1, a + r * F,
                                D, F);
      k::grouped_linear_forward(s, x + r * D, w.w3 + j * F * D, n, 1, b + r * F,
                                D, F);
      k::swiglu_forward(s, a + r * F, b + r * F, h + r * F, *n * F);
      k::grouped_linear_forward(s, h + r * F, w.w2 + j * D * F, n, 1, y + r * D,
                                F, D);
    });
    return;
  }
  k::grouped_linear_forward(s, x, w.w1, rows, experts_, a, hidden_,
                            intermediate_);
  k::grouped_linear_forward(s, x, w.w3, rows, experts_, b, hidden_,
                            intermediate_);
  k::swiglu_forward(s, a, b, h, m * intermediate_);
  k::grouped_linear_forward(s, h, w.w2, rows, experts_, y, intermediate_,
                            hidden_);
}

void expert_ffn::backward(const k::stream& s, int64_t layer,
                          const expert_block& w, const float* dy, float* dx,
                          const int64_t* rows, int64_t first_row) {
  auto& sv = saved_[layer];
  if (rows == nullptr) {
    rows = sv.rows.data();
    first_row = 0;
  }
  const int64_t m = std::accumulate(rows, rows + experts_, int64_t{0});
  const float* x = sv.x.data() + first_row * hidden_;
  const float* a = sv.a.data() + first_row * intermediate_;
  const float* b = sv.b.data() + first_row * intermediate_;
  const float* h = sv.h.data() + first_row * intermediate_;
  dh_.resize(s, m * intermediate_);
  da_.resize(s, m * intermediate_);
  db_.resize(s, m * intermediate_);
  dx_tmp_.resize(s, m * hidden_);
  if (lends_work(s, rows)) {
    const int64_t D = hidden_, F = intermediate_;
    float *dh = dh_.data(), *da = da_.data(), *db = db_.data(),
          *dx2 = dx_tmp_.data();
    per_expert(rows, [&](int64_t j, int64_t r) {
      const int64_t* n = rows + j;
      k::grouped_linear_backward(s, h + r * F, w.w2 + j * D * F, dy + r * D, n,
                                 1, dh + r * F, w.dw2 + j * D * F, F, D);
      k::swiglu_backward(s, a + r * F, b + r * F, dh + r * F, da + r * F,
                         db + r * F, *n * F);
      k::grouped_linear_backward(s, x + r * D, w.w1 + j * F * D, da + r * F, n,
                                 1, dx + r * D, w.dw1 + j * F * D, D, F);
      k::grouped_linear_backward(s, x + r * D, w.w3 + j * F * D, db + r * F, n,
                                 1, dx2 + r * D, w.dw3 + j * F * D, D, F);
      k::axpy(s, 1.0f, dx2 + r * D, dx + r * D, *n * D);
    });
    return;
  }
  k::grouped_linear_backward(s, h, w.w2, dy, rows, experts_, dh_.data(), w.dw2,
                             intermediate_, hidden_);
  k::swiglu_backward(s, a, b, dh_.data(), da_.data(), db_.data(),
                     m * intermediate_);
  k::grouped_linear_backward(s, x, w.w1, da_.data(), rows, experts_, dx, w.dw1,
                             hidden_, intermediate_);
  k::grouped_linear_backward(s, x, w.w3, db_.data(), rows, experts_,
                             dx_tmp_.data(), w.dw3, hidden_, intermediate_);
  k::axpy(s, 1.0f, dx_tmp_.data(), dx, m * hidden_);
}

} // namespace tutti::model
