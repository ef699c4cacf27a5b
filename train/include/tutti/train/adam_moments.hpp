#pragma once
// AdamW's two moments of a run of parameters, stored as
// train.precision.moments says: float32, or bfloat16 bits (half the
// memory, as DeepSeek-V3 trained; each step widens them exactly, updates
// them in float and rounds them back to nearest even). Checkpoints and
// layout changes see float values either way.

#include <cstdint>
#include <vector>

#include "tutti/config/enums.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/kernels/tensor.hpp"

namespace tutti::train {

// AdamW's hyper-parameters for one step.
struct adamw_step_args {
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  int64_t step = 1; // 1-based, for the bias correction
  double grad_scale = 1;
};

class adam_moments {
public:
  // n zeros of each moment in `dtype`.
  void zeros(const kernels::stream& s, size_t n, storage_dtype dtype);
  size_t size() const { return bf16_ ? m16_.size() : m_.size(); }
  bool bf16() const { return bf16_; }

  // One step of the `n` parameters at `param` (gradients `grad`), whose
  // moments are this object's at `at`: in place.
  void step(const kernels::stream& s, float* param, const float* grad,
            int64_t at, int64_t n, const adamw_step_args& a);
  // The same step out of place: parameters into `param_out`, moments into
  // `out` at `at` (sized and typed as this); this object stays as it was.
  void step_into(const kernels::stream& s, const float* param,
                 const float* grad, float* param_out, adam_moments& out,
                 int64_t at, int64_t n, const adamw_step_args& a) const;

  // Moments [offset, offset + n) as floats, from and to the host.
  void download(const kernels::stream& s, float* m, float* v, int64_t n,
                int64_t offset) const;
  void upload(const kernels::stream& s, const float* m, const float* v,
              int64_t n, int64_t offset);

  void swap(adam_moments& other);

private:
  bool bf16_ = false;
  kernels::tensor<float> m_, v_;
  kernels::tensor<uint16_t> m16_, v16_;
};

} // namespace tutti::train
