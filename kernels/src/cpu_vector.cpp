// The vectorised float inner loops (cpu_vector.hpp). Sums run over 16
// fixed lanes combined in a fixed order: the result depends on the length
// only, never on alignment or the instruction set's width.

#include "cpu_vector.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tutti/kernels/bf16_bits.hpp"

namespace tutti::kernels::cpu::vector {

namespace {
constexpr int lanes = 16;

float lane_sum(const float (&acc)[lanes]) {
  float s = 0.0f;
  for (int l = 0; l < lanes; ++l)
    s += acc[l];
  return s;
}
} // namespace

TUTTI_CPU_CLONES
void swiglu_forward(const float* gate, const float* up, float* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    h[i] = g * fast_sigmoid(g) * up[i];
  }
}

TUTTI_CPU_CLONES
void swiglu_backward(const float* gate, const float* up, const float* dh,
                     float* dgate, float* dup, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], sg = fast_sigmoid(g), d = dh[i];
    dgate[i] = d * up[i] * sg * (1.0f + g * (1.0f - sg));
    dup[i] = d * g * sg;
  }
}

TUTTI_CPU_CLONES
void causal_softmax_row(float* row, int64_t len, int64_t width) {
  float lane_max[lanes];
  for (int l = 0; l < lanes; ++l)
    lane_max[l] = row[0];
  int64_t j = 0;
  for (; j + lanes <= len; j += lanes)
    for (int l = 0; l < lanes; ++l)
      lane_max[l] = row[j + l] > lane_max[l] ? row[j + l] : lane_max[l];
  for (int l = 0; j + l < len; ++l)
    lane_max[l] = row[j + l] > lane_max[l] ? row[j + l] : lane_max[l];
  float mx = lane_max[0];
  for (int l = 1; l < lanes; ++l)
    mx = lane_max[l] > mx ? lane_max[l] : mx;
  float acc[lanes] = {};
  j = 0;
  for (; j + lanes <= len; j += lanes)
    for (int l = 0; l < lanes; ++l) {
      const float e = fast_exp(row[j + l] - mx);
      row[j + l] = e;
      acc[l] += e;
    }
  for (int l = 0; j + l < len; ++l) {
    const float e = fast_exp(row[j + l] - mx);
    row[j + l] = e;
    acc[l] += e;
  }
  const float inv = 1.0f / lane_sum(acc);
  for (int64_t i = 0; i < len; ++i)
    row[i] *= inv;
  std::fill(row + len, row + width, 0.0f);
}

TUTTI_CPU_CLONES
void causal_softmax_backward_row(const float* p, float* r, int64_t len,
                                 int64_t width) {
  float acc[lanes] = {};
  int64_t j = 0;
  for (; j + lanes <= len; j += lanes)
    for (int l = 0; l < lanes; ++l)
      acc[l] += p[j + l] * r[j + l];
  for (int l = 0; j + l < len; ++l)
    acc[l] += p[j + l] * r[j + l];
  const float dot = lane_sum(acc);
  for (int64_t i = 0; i < len; ++i)
    r[i] = p[i] * (r[i] - dot);
  std::fill(r + len, r + width, 0.0f);
}

namespace {
constexpr int double_lanes = 8;

double lane_sum(const double (&acc)[double_lanes]) {
  double s = 0.0;
  for (int l = 0; l < double_lanes; ++l)
    s += acc[l];
  return s;
}
} // namespace

TUTTI_CPU_CLONES
double sum_squares(const float* x, int64_t n) {
  double acc[double_lanes] = {};
  int64_t i = 0;
  for (; i + double_lanes <= n; i += double_lanes)
    for (int l = 0; l < double_lanes; ++l)
      acc[l] += double(x[i + l]) * double(x[i + l]);
  for (int l = 0; i + l < n; ++l)
    acc[l] += double(x[i + l]) * double(x[i + l]);
  return lane_sum(acc);
}

TUTTI_CPU_CLONES
bool all_finite(const float* x, int64_t n) {
  // A float is NaN or infinite exactly when its exponent bits are all ones:
  // the largest exponent field over x says it, and the max vectorises.
  uint32_t top = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    bits &= 0x7f800000u;
    top = bits > top ? bits : top;
  }
  return top != 0x7f800000u;
}

TUTTI_CPU_CLONES
double dot3(const float* a, const float* b, const float* c, int64_t n) {
  double acc[double_lanes] = {};
  int64_t i = 0;
  for (; i + double_lanes <= n; i += double_lanes)
    for (int l = 0; l < double_lanes; ++l)
      acc[l] += double(a[i + l]) * double(b[i + l]) * double(c[i + l]);
  for (int l = 0; i + l < n; ++l)
    acc[l] += double(a[i + l]) * double(b[i + l]) * double(c[i + l]);
  return lane_sum(acc);
}

namespace {
// One element of AdamW. The callers' pointers are __restrict (distinct
// arrays, or the same array read and written at the same index only) so
// that the loops vectorise without runtime alias checks.
struct adamw_consts {
  double lr, beta1, beta2, eps, decay, inv_bc1, inv_bc2, grad_scale;
};

__attribute__((always_inline)) inline void adamw_element(
  const adamw_consts& c, float param, float grad, float m, float v,
  float& param_out, float& m_out, float& v_out) {
  const double g = double(grad) * c.grad_scale;
  const double mi = c.beta1 * double(m) + (1.0 - c.beta1) * g;
  const double vi = c.beta2 * double(v) + (1.0 - c.beta2) * g * g;
  const double p = double(param) * c.decay;
  m_out = float(mi);
  v_out = float(vi);
  // The step's denominator in float: a double division and square root per
  // element made this loop compute-bound, and the denominator's float
  // rounding (about 6e-8 relative) changes the step, itself about lr
  // relative to the weight, far below the weight's own float rounding.
  const float inv_denom = 1.0f
                          / (std::sqrt(float(vi * c.inv_bc2)) + float(c.eps));
  param_out = float(p - c.lr * mi * c.inv_bc1 * double(inv_denom));
}

TUTTI_CPU_CLONES
void adamw_in_place(const adamw_consts& c, float* __restrict param,
                    const float* __restrict grad, float* __restrict m,
                    float* __restrict v, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    adamw_element(c, param[i], grad[i], m[i], v[i], param[i], m[i], v[i]);
}

TUTTI_CPU_CLONES
void adamw_out_of_place(const adamw_consts& c, const float* __restrict param,
                        const float* __restrict grad, const float* __restrict m,
                        const float* __restrict v, float* __restrict param_out,
                        float* __restrict m_out, float* __restrict v_out,
                        int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    adamw_element(c, param[i], grad[i], m[i], v[i], param_out[i], m_out[i],
                  v_out[i]);
}
TUTTI_CPU_CLONES
void adamw_bf16_loop(const adamw_consts& c, const float* param,
                     const float* grad, const uint16_t* m, const uint16_t* v,
                     float* param_out, uint16_t* m_out, uint16_t* v_out,
                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float p, mi, vi;
    adamw_element(c, param[i], grad[i], float_of_bf16(m[i]),
                  float_of_bf16(v[i]), p, mi, vi);
    param_out[i] = p;
    m_out[i] = bf16_bits(mi);
    v_out[i] = bf16_bits(vi);
  }
}
} // namespace

void adamw_bf16_moments(const float* param, const float* grad,
                        const uint16_t* m, const uint16_t* v, float* param_out,
                        uint16_t* m_out, uint16_t* v_out, int64_t n, double lr,
                        double beta1, double beta2, double eps, double decay,
                        double bc1, double bc2, double grad_scale) {
  const adamw_consts c{lr,    beta1,     beta2,     eps,
                       decay, 1.0 / bc1, 1.0 / bc2, grad_scale};
  adamw_bf16_loop(c, param, grad, m, v, param_out, m_out, v_out, n);
}

void adamw(const float* param, const float* grad, const float* m,
           const float* v, float* param_out, float* m_out, float* v_out,
           int64_t n, double lr, double beta1, double beta2, double eps,
           double decay, double bc1, double bc2, double grad_scale) {
  const adamw_consts c{lr,    beta1,     beta2,     eps,
                       decay, 1.0 / bc1, 1.0 / bc2, grad_scale};
  if (param == param_out && m == m_out && v == v_out)
    adamw_in_place(c, param_out, grad, m_out, v_out, n);
  else
    adamw_out_of_place(c, param, grad, m, v, param_out, m_out, v_out, n);
}

} // namespace tutti::kernels::cpu::vector
