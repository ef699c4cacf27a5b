#include "tutti/train/adam_moments.hpp"

#include <utility>

#include "tutti/kernels/bf16_bits.hpp"
#include "tutti/kernels/ops.hpp"

namespace tutti::train {

namespace k = kernels;

void adam_moments::zeros(const k::stream& s, size_t n, storage_dtype dtype) {
  bf16_ = dtype == storage_dtype::bf16;
  if (bf16_) {
    m16_.zeros(s, n);
    v16_.zeros(s, n);
    m_ = {};
    v_ = {};
  } else {
    m_.zeros(s, n);
    v_.zeros(s, n);
    m16_ = {};
    v16_ = {};
  }
}

void adam_moments::step(const k::stream& s, float* param, const float* grad,
                        int64_t at, int64_t n, const adamw_step_args& a) {
  step_into(s, param, grad, param, *this, at, n, a);
}

void adam_moments::step_into(const k::stream& s, const float* param,
                             const float* grad, float* param_out,
                             adam_moments& out, int64_t at, int64_t n,
                             const adamw_step_args& a) const {
  if (bf16_)
    k::adamw_step_bf16_moments(s, param, grad, m16_.data() + at,
                               v16_.data() + at, param_out,
                               out.m16_.data() + at, out.v16_.data() + at, n,
                               a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                               a.step, a.grad_scale);
  else
    k::adamw_step_into(s, param, grad, m_.data() + at, v_.data() + at,
                       param_out, out.m_.data() + at, out.v_.data() + at, n,
                       a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step,
                       a.grad_scale);
}

void adam_moments::download(const k::stream& s, float* m, float* v, int64_t n,
                            int64_t offset) const {
  if (!bf16_) {
    m_.download(s, m, static_cast<size_t>(n), static_cast<size_t>(offset));
    v_.download(s, v, static_cast<size_t>(n), static_cast<size_t>(offset));
    return;
  }
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  for (auto [from, to] : {std::pair{&m16_, m}, std::pair{&v16_, v}}) {
    from->download(s, bits.data(), bits.size(), static_cast<size_t>(offset));
    for (size_t i = 0; i < bits.size(); ++i)
      to[i] = k::float_of_bf16(bits[i]);
  }
}

void adam_moments::upload(const k::stream& s, const float* m, const float* v,
                          int64_t n, int64_t offset) {
  if (!bf16_) {
    m_.upload(s, m, static_cast<size_t>(n), static_cast<size_t>(offset));
    v_.upload(s, v, static_cast<size_t>(n), static_cast<size_t>(offset));
    return;
  }
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  for (auto [from, to] : {std::pair{m, &m16_}, std::pair{v, &v16_}}) {
    for (size_t i = 0; i < bits.size(); ++i)
      bits[i] = k::bf16_bits(from[i]);
    to->upload(s, bits.data(), bits.size(), static_cast<size_t>(offset));
  }
}

void adam_moments::swap(adam_moments& other) {
  std::swap(bf16_, other.bf16_);
  std::swap(m_, other.m_);
  std::swap(v_, other.v_);
  std::swap(m16_, other.m16_);
  std::swap(v16_, other.v16_);
}

} // namespace tutti::train
