// The dispatch as every strategy runs it: the rows as they are, or, with
// an 8-bit dispatch_dtype, each token's row quantized (one float32 scale
// and d codes, kernels/row_quant.hpp) before the strategy moves it and
// dequantized into the caller's float32 landing buffer where it lands.
// The strategy sees rows of quantized_row_floats(d) floats, so what it
// sends and counts (bytes_to) is the 8-bit payload; a token is quantized
// once, before any strategy copies it to its experts or relays.

#include "exchanges.hpp"
#include "tutti/kernels/row_quant.hpp"

namespace tutti::moe {

namespace k = tutti::kernels;

int64_t dispatch_row_bytes(dispatch_dtype dtype, int64_t d) {
  return dtype == dispatch_dtype::fp32
           ? d * int64_t(sizeof(float))
           : k::quantized_row_floats(d) * int64_t(sizeof(float));
}

status token_exchange::dispatch(const routed_rows& rows, exchange_plan& plan,
                                k::tensor<float>& dispatch_order,
                                const landing& land, exchange_clock& clock) {
  if (dtype_ == dispatch_dtype::fp32)
    return dispatch_rows(rows, plan, dispatch_order, land, clock);
  const auto code = dtype_ == dispatch_dtype::int8 ? k::row_code::int8
                                                   : k::row_code::fp8_e4m3;
  const int64_t d = rows.d, width = k::quantized_row_floats(d);
  quantized_tokens_.resize(stream_,
                           std::max<int64_t>(rows.tokens_count, 1) * width);
  k::quantize_rows(code, rows.tokens, rows.tokens_count, d,
                   quantized_tokens_.data());
  routed_rows quantized = rows;
  quantized.tokens = quantized_tokens_.data();
  quantized.d = width;
  // The caller's landing is told rows of d floats; the strategy lands the
  // quantized rows in a buffer of this exchange's.
  float* landed = nullptr;
  auto land_quantized = [&](const exchange_plan&) -> expected<float*> {
    plan.d = d;
    auto at = land(plan);
    plan.d = width;
    if (!at.ok())
      return at;
    landed = at.value();
    quantized_landing_.resize(stream_,
                              std::max<int64_t>(plan.recv_rows, 1) * width);
    return quantized_landing_.data();
  };
  const status moved = dispatch_rows(quantized, plan, dispatch_order,
                                     land_quantized, clock);
  plan.d = d;
  if (!moved.ok())
    return moved;
  k::dequantize_rows(code, quantized_landing_.data(), plan.recv_rows, d,
                     landed);
  // The in-process runs are in floats: the way back's are of full rows.
  if (!plan.dispatch_runs.empty())
    plan_runs(plan);
  return {};
}

} // namespace tutti::moe
