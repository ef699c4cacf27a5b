// Row-wise and elementwise ops: embedding, RMSNorm, RoPE, SwiGLU and the
// small vector helpers (axpy, fill_zero, sum_squares).
//
// Per-row reductions are accumulated in double and the result rounded once,
// so float and double agree closely and the order is fixed (for float over
// the fixed lanes of cpu_vector.hpp, so that the loops vectorise).

#include "backends.hpp"
#include "cpu_vector.hpp"
#include "host_device.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace tutti::kernels::cpu {

// -- embedding ----------------------------------------------------------------

template <class T>
void embedding_forward(const stream&, const int32_t* ids, const T* table,
                       T* out, int64_t n, int64_t dim) {
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * dim, table + static_cast<int64_t>(ids[i]) * dim,
                sizeof(T) * dim);
}

template <class T>
void embedding_backward(const stream&, const int32_t* ids, const T* dout,
                        T* dtable, int64_t n, int64_t dim) {
  // Sequential over tokens: repeated ids add up in token order, every time.
  for (int64_t i = 0; i < n; ++i) {
    T* row = dtable + static_cast<int64_t>(ids[i]) * dim;
    const T* g = dout + i * dim;
    for (int64_t j = 0; j < dim; ++j)
      row[j] += g[j];
  }
}

// -- RMSNorm --------------------------------------------------------------------

template <class T>
void rmsnorm_forward(const stream&, const T* x, const T* w, T* y, T* rstd,
                     int64_t n, int64_t dim, T eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * dim;
    double ss = 0.0;
    if constexpr (std::is_same_v<T, float>)
      ss = vector::sum_squares(xi, dim);
    else
      for (int64_t j = 0; j < dim; ++j)
        ss += double(xi[j]) * double(xi[j]);
    const double r = 1.0 / std::sqrt(ss / double(dim) + double(eps));
    rstd[i] = T(r);
    T* yi = y + i * dim;
    for (int64_t j = 0; j < dim; ++j)
      yi[j] = T(double(xi[j]) * r * double(w[j]));
  }
}

// With r = rstd and g = w * dy:  dx = r * g - x * r^3 * <g, x> / dim,
// because d r / d x_j = -r^3 x_j / dim.
template <class T>
void rmsnorm_backward(const stream&, const T* x, const T* w, const T* rstd,
                      const T* dy, T* dx, T* dw, int64_t n, int64_t dim) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * dim;
    const T* gi = dy + i * dim;
    const double r = double(rstd[i]);
    double dot = 0.0;
    if constexpr (std::is_same_v<T, float>)
      dot = vector::dot3(w, gi, xi, dim);
    else
      for (int64_t j = 0; j < dim; ++j)
        dot += double(w[j]) * double(gi[j]) * double(xi[j]);
    const double c = r * r * r * dot / double(dim);
    T* dxi = dx + i * dim;
    for (int64_t j = 0; j < dim; ++j) {
      dxi[j] = T(r * double(w[j]) * double(gi[j]) - double(xi[j]) * c);
      dw[j] += T(double(gi[j]) * double(xi[j]) * r);
    }
  }
}

// -- RoPE -------------------------------------------------------------------------

namespace {

// Rotates every (i, i + half) pair of x[batch, seq, heads, head_dim] by
// +angle (forward) or -angle (backward: the transpose of a rotation is its
// inverse). Angles are computed in double once per (position, i).
template <class T>
void rope_apply(T* x, int64_t batch, int64_t seq, int64_t heads,
                int64_t head_dim, double theta, double direction) {
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(half), cs(half), sn(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0 * double(i) / double(head_dim));
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(p) * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = direction * std::sin(a);
    }
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        T* v = x + ((b * seq + p) * heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          // x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1).
          const double x1 = v[i], x2 = v[i + half];
          v[i] = T(x1 * cs[i] - x2 * sn[i]);
          v[i + half] = T(x2 * cs[i] + x1 * sn[i]);
        }
      }
    }
  }
}

} // namespace

template <class T>
void rope_forward(const stream&, T* x, int64_t batch, int64_t seq,
                  int64_t heads, int64_t head_dim, double theta) {
  rope_apply(x, batch, seq, heads, head_dim, theta, 1.0);
}

template <class T>
void rope_backward(const stream&, T* dx, int64_t batch, int64_t seq,
                   int64_t heads, int64_t head_dim, double theta) {
  rope_apply(dx, batch, seq, heads, head_dim, theta, -1.0);
}

// -- SwiGLU -----------------------------------------------------------------------

using detail::sigmoid;

template <class T>
void swiglu_forward(const stream&, const T* gate, const T* up, T* h,
                    int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    return vector::swiglu_forward(gate, up, h, n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    h[i] = T(g * sigmoid(g) * double(up[i]));
  }
}

// silu'(g) = sig(g) * (1 + g * (1 - sig(g))).
template <class T>
void swiglu_backward(const stream&, const T* gate, const T* up, const T* dh,
                     T* dgate, T* dup, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    return vector::swiglu_backward(gate, up, dh, dgate, dup, n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], sg = sigmoid(g), d = dh[i];
    dgate[i] = T(d * double(up[i]) * sg * (1.0 + g * (1.0 - sg)));
    dup[i] = T(d * g * sg);
  }
}

// -- reductions and helpers --------------------------------------------------

template <class T>
double sum_squares(const stream&, const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    return vector::sum_squares(x, n);
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i)
    acc += double(x[i]) * double(x[i]);
  return acc;
}

template <class T>
bool all_finite(const stream&, const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    return vector::all_finite(x, n);
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      return false;
  return true;
}

template <class T>
void axpy(const stream&, T a, const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] += a * x[i];
}

template <class T>
void fill_zero(const stream&, T* x, int64_t n) {
  std::fill(x, x + n, T(0));
}

template <class T>
void strided_copy(const stream&, const T* src, int64_t src_row, int64_t src_col,
                  T* dst, int64_t dst_row, int64_t dst_col, int64_t rows,
                  int64_t cols, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* in = src + r * src_row;
    T* out = dst + r * dst_row;
    if (accumulate)
      for (int64_t c = 0; c < cols; ++c)
        out[c * dst_col] += in[c * src_col];
    else
      for (int64_t c = 0; c < cols; ++c)
        out[c * dst_col] = in[c * src_col];
  }
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_ELEMENTWISE
#include "instantiate_ops.inc"

} // namespace tutti::kernels::cpu
