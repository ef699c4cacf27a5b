#pragma once
// Internal to the CPU backend: the float inner loops that dominate a step
// once the GEMMs are fast (SwiGLU, the attention softmax, AdamW), written so
// the compiler vectorises them, and built for three instruction sets with
// the best one chosen when the program loads (target_clones): the tree is
// compiled for baseline x86-64, the machines run AVX2 or AVX-512.
//
// fast_exp is the Cephes single-precision exponential (range reduction by
// ln 2 in two parts, a degree-6 polynomial, the exponent set by bit
// arithmetic): within 2 ulp of expf over its range. Results differ from the C library's in the
// last bits; they depend only on the inputs (and the instruction set), so
// runs that must agree still agree.

#include <cstdint>
#include <cstring>

// Chosen by instruction-set feature, not by CPU model: a model newer than
// the compiler (this project's Xeons) would get the baseline clone.
#if defined(__x86_64__) && !defined(__clang__)
#define TUTTI_CPU_CLONES                                                       \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TUTTI_CPU_CLONES
#endif

namespace tutti::kernels::cpu::vector {

// Branch-free, so that loops of it vectorise: the clamp is a select, the
// rounding to an integer adds and subtracts 1.5 * 2^23, and a NaN or an
// infinity in gives NaN out (0 * x is NaN for both), which the NaN guards
// downstream rely on.
__attribute__((always_inline)) inline float fast_exp(float x) {
  const float input = x;
  x = x < 88.3762626647949f ? x : 88.3762626647949f;
  x = x > -87.3365447504f ? x : -87.3365447504f;
  // n = round(x / ln 2); x - n ln 2 with ln 2 in two parts.
  const float fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const int32_t n = static_cast<int32_t>(fn);
  x = x - fn * 0.693359375f + fn * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * x * x + x + 1.0f;
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale + 0.0f * input;
}

__attribute__((always_inline)) inline float fast_sigmoid(float g) {
  return 1.0f / (1.0f + fast_exp(-g));
}

// h = silu(gate) * up.
void swiglu_forward(const float* gate, const float* up, float* h, int64_t n);
// silu'(g) = sig(g) * (1 + g * (1 - sig(g))).
void swiglu_backward(const float* gate, const float* up, const float* dh,
                     float* dgate, float* dup, int64_t n);
// row[0, len) = softmax(row[0, len)), row[len, width) = 0.
void causal_softmax_row(float* row, int64_t len, int64_t width);
// r[j] = p[j] * (r[j] - sum_j p[j] r[j]) over [0, len), r[len, width) = 0.
void causal_softmax_backward_row(const float* p, float* r, int64_t len,
                                 int64_t width);

// sum x[i]^2 and sum a[i] * b[i] * c[i], accumulated in double over 8
// fixed lanes (combined in a fixed order).
double sum_squares(const float* x, int64_t n);
double dot3(const float* a, const float* b, const float* c, int64_t n);
// No x[i] is NaN or infinite (tested on the exponent bits).
bool all_finite(const float* x, int64_t n);

// One AdamW update (decoupled weight decay): the generic loop's arithmetic
// (cpu_loss_optim.cpp), in double but for the step's denominator, which is
// float (cpu_vector.cpp says why); bc1, bc2 are the bias corrections.
// Outputs are either all their inputs (in place) or all distinct arrays.
void adamw(const float* param, const float* grad, const float* m,
           const float* v, float* param_out, float* m_out, float* v_out,
           int64_t n, double lr, double beta1, double beta2, double eps,
           double decay, double bc1, double bc2, double grad_scale);

// The same update on moments stored as bfloat16 bits: widened exactly,
// updated as above, rounded back to nearest even (bf16_bits.hpp). Each
// output may be its input.
void adamw_bf16_moments(const float* param, const float* grad,
                        const uint16_t* m, const uint16_t* v, float* param_out,
                        uint16_t* m_out, uint16_t* v_out, int64_t n, double lr,
                        double beta1, double beta2, double eps, double decay,
                        double bc1, double bc2, double grad_scale);

} // namespace tutti::kernels::cpu::vector
