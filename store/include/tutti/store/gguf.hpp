#pragma once
// GGUF (version 3), the file llama.cpp loads: a header of typed key/value
// metadata and tensor descriptions, then the tensors, each aligned to
// `general.alignment` (32). Tensors are written F32, or F16 for those with
// two or more dimensions when asked (norms and other vectors stay F32, as
// llama.cpp's converters do). Shapes are given row-major, as everywhere in
// tutti; the file stores them fastest dimension first, as ggml does.

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
};

// Writes atomically (tmp + fsync + rename + directory fsync).
status write_gguf(const std::filesystem::path& file,
                  const std::vector<std::pair<std::string, gguf_value>>& kv,
                  const std::vector<gguf_tensor>& tensors, bool f16);

// IEEE half precision, round to nearest even (the bits).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

} // namespace tutti::store
