#include "tutti/model/expert_ffn.hpp"

#include <numeric>

#include "tutti/kernels/ops.hpp"

namespace tutti::model {

namespace k = tutti::kernels;

expert_ffn::expert_ffn(int64_t layers, int64_t experts, int64_t hidden,
                       int64_t intermediate)
  : experts_(experts),
    hidden_(hidden),
    intermediate_(intermediate),
    saved_(layers) {
}

void expert_ffn::forward(const k::stream& s, int64_t layer,
                         const expert_block& w, const float* x,
                         const int64_t* rows, float* y) {
  auto& sv = saved_[layer];
  sv.rows.assign(rows, rows + experts_);
  const int64_t m = std::accumulate(rows, rows + experts_, int64_t{0});
  sv.x.assign(s, x, m * hidden_);
  sv.a.resize(s, m * intermediate_);
  sv.b.resize(s, m * intermediate_);
  sv.h.resize(s, m * intermediate_);
  k::grouped_linear_forward(s, x, w.w1, rows, experts_, sv.a.data(), hidden_,
                            intermediate_);
  k::grouped_linear_forward(s, x, w.w3, rows, experts_, sv.b.data(), hidden_,
                            intermediate_);
  k::swiglu_forward(s, sv.a.data(), sv.b.data(), sv.h.data(), m * intermediate_);
  k::grouped_linear_forward(s, sv.h.data(), w.w2, rows, experts_, y,
                            intermediate_, hidden_);
}

void expert_ffn::backward(const k::stream& s, int64_t layer,
                          const expert_block& w, const float* dy, float* dx) {
  auto& sv = saved_[layer];
  const int64_t m = static_cast<int64_t>(sv.x.size()) / hidden_;
  dh_.resize(s, m * intermediate_);
  da_.resize(s, m * intermediate_);
  db_.resize(s, m * intermediate_);
  dx_tmp_.resize(s, m * hidden_);
  const int64_t* rows = sv.rows.data();
  k::grouped_linear_backward(s, sv.h.data(), w.w2, dy, rows, experts_,
                             dh_.data(), w.dw2, intermediate_, hidden_);
  k::swiglu_backward(s, sv.a.data(), sv.b.data(), dh_.data(), da_.data(),
                     db_.data(), m * intermediate_);
  k::grouped_linear_backward(s, sv.x.data(), w.w1, da_.data(), rows, experts_,
                             dx, w.dw1, hidden_, intermediate_);
  k::grouped_linear_backward(s, sv.x.data(), w.w3, db_.data(), rows, experts_,
                             dx_tmp_.data(), w.dw3, hidden_, intermediate_);
  k::axpy(s, 1.0f, dx_tmp_.data(), dx, m * hidden_);
}

} // namespace tutti::model
