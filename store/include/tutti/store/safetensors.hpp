#pragma once
// Hugging Face safetensors, the file `tutti export --format hf` writes so a
// model can leave tutti for the tools people already use.
//
// Layout: u64 little-endian header length N; N bytes of UTF-8 JSON
//   {"__metadata__": {string: string}, name: {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces so the data starts 8-byte aligned; then the data. The
// offsets are relative to the data start, cover it exactly and without
// overlap (this writer emits them contiguous in the given order). F32 is
// written, I8 for tensors marked int8 and F8_E4M3 for those marked
// fp8_e4m3; read_safetensors reads F32, read_safetensors_as_f32 also F16,
// BF16, I8 and F8_E4M3.
//
// An 8-bit weight (`tutti export --dtype int8`, as compressed-tensors
// stores a channel-wise int8 weight): `<name>.weight` I8 [out, in] and
// `<name>.weight_scale` F32 [out, 1], the weight being code * scale.
//
// An FP8 weight (DeepSeek-V3's block-scaled checkpoints): `<name>.weight`
// F8_E4M3 [out, in] and `<name>.weight_scale_inv` F32 with one scale per
// block of the weight (config.json's quantization_config); the model's
// loader pairs and dequantizes them (tutti/model/weights.hpp).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::store {

struct named_tensor {
  std::string name;
  std::vector<std::int64_t> shape; // [] is a scalar
  std::vector<float> data;         // product(shape) elements, row-major
  // Stored as I8: data holds whole numbers in [-128, 127].
  bool int8 = false;
  // Stored as F8_E4M3: data holds values of that format, exactly.
  bool fp8_e4m3 = false;
};

// The value of an FP8 e4m3 byte (OCP's E4M3FN, as PyTorch's
// float8_e4m3fn): a sign, 4 exponent bits of bias 7, 3 mantissa bits,
// subnormals below exponent 1; 0x7F and 0xFF are NaN, there are no
// infinities (the largest value is 448).
float fp8_e4m3_value(std::uint8_t code);

// Writes atomically (tmp + fsync + rename + directory fsync), creating the
// directory if missing. Names must be unique, non-empty, not "__metadata__";
// names and metadata must be valid UTF-8; data.size() must match the shape;
// an int8 tensor's values must be int8 codes, an fp8_e4m3 one's e4m3
// values.
status write_safetensors(
  const std::filesystem::path& file, const std::vector<named_tensor>& tensors,
  const std::map<std::string, std::string>& metadata = {});

// Reads and validates by the format rules: header length within the file and
// at most 100 MB (the reference implementation's limit), header is strict
// JSON (an object; duplicate keys refused), every tensor F32 with
// product(shape) * 4 == end - begin, offsets starting at 0, contiguous, and
// ending exactly at the end of the file. Tensors come back in header order.
// `metadata`, when given, receives "__metadata__" (empty if absent).
expected<std::vector<named_tensor>> read_safetensors(
  const std::filesystem::path& file,
  std::map<std::string, std::string>* metadata = nullptr);

// read_safetensors' checks, also accepting F16 and BF16 tensors (as
// Hugging Face models ship), converted exactly to float, I8 tensors
// (their codes as floats, marked int8) and F8_E4M3 tensors (their values
// as floats, marked fp8_e4m3).
expected<std::vector<named_tensor>> read_safetensors_as_f32(
  const std::filesystem::path& file,
  std::map<std::string, std::string>* metadata = nullptr);

// read_safetensors_as_f32 one tensor at a time, reading only what `keep`
// takes (by name, and how it is stored: the others' bytes are never read):
// each goes to `sink` as it is read, so a reader of part of a large file
// holds no more than that part. The whole header is checked first, as
// read_safetensors does; an error from `sink` ends the read.
enum class stored_as { floating, int8, fp8_e4m3 }; // F32/F16/BF16, I8, F8
using tensor_filter =
  std::function<bool(const std::string& name, stored_as how)>;
using tensor_sink = std::function<status(named_tensor&&)>;
status read_safetensors_each(const std::filesystem::path& file,
                             const tensor_filter& keep,
                             const tensor_sink& sink);

} // namespace tutti::store
