#pragma once
// GGUF (version 3), the file llama.cpp loads: a header of typed key/value
// metadata and tensor descriptions, then the tensors, each aligned to
// `general.alignment` (32). Tensors are written F32, or F16 for those with
// two or more dimensions when asked (norms and other vectors stay F32, as
// llama.cpp's converters do), or Q8_0 for tensors marked so. Shapes are
// given row-major, as everywhere in tutti; the file stores them fastest
// dimension first, as ggml does.
//
// Q8_0 (ggml's block_q8_0): each 32 consecutive values of a row are one
// block, an F16 scale d = absmax / 127 and 32 int8 codes round(x / d)
// (rounding half away from zero), exactly as llama.cpp's
// quantize_row_q8_0_ref does; rows must be a multiple of 32 long.

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::store {

using gguf_value = std::variant<uint32_t, int32_t, uint64_t, float, bool,
                                std::string, std::vector<std::string>,
                                std::vector<float>, std::vector<int32_t>>;

struct gguf_tensor {
  std::string name;
  std::vector<int64_t> shape; // row-major
  const float* data = nullptr;
  bool q8_0 = false; // written as Q8_0 (the innermost dimension % 32 == 0)
};

// Writes atomically (tmp + fsync + rename + directory fsync).
status write_gguf(const std::filesystem::path& file,
                  const std::vector<std::pair<std::string, gguf_value>>& kv,
                  const std::vector<gguf_tensor>& tensors, bool f16);

// IEEE half precision, round to nearest even (the bits).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

// One row of n values (n % 32 == 0) as Q8_0 blocks: n / 32 * 34 bytes.
std::string quantize_q8_0(const float* x, int64_t n);

} // namespace tutti::store
