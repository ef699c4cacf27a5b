#include "tutti/model/expert_ffn.hpp"

#include <numeric>

#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"

namespace tutti::model {

namespace k = tutti::kernels;

expert_ffn::expert_ffn(int64_t layers, int64_t experts, int64_t hidden,
                       int64_t intermediate)
  : experts_(experts), hidden_(hidden), intermediate_(intermediate),
    saved_(layers) {}

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
