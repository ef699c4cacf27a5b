#pragma once
// How a rank's MoE block reaches the experts it dispatched tokens to. In
// tutti the rank's expert shard actor implements it (actors/); tests and
// benchmarks can run an expert_ffn directly.

#include <cstdint>

#include "tutti/comm/status.hpp"

namespace tutti::model {

class expert_executor {
public:
  virtual ~expert_executor() = default;

  // x: m rows in expert-major order, rows[j] for local expert j; y: [m, D].
  virtual status forward(int64_t layer, const float* x, const int64_t* rows,
                         int64_t m, float* y) = 0;

  // Gradient of the last forward of `layer`: dy [m, D] -> dx [m, D].
  virtual status backward(int64_t layer, const float* dy, int64_t m,
                          float* dx) = 0;
};

} // namespace tutti::model
