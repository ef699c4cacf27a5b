#include "tutti/store/gguf.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "tutti/store/atomic_file.hpp"

namespace tutti::store {

namespace {

constexpr uint64_t alignment = 32;

// ggml tensor types and GGUF value types used here.
constexpr uint32_t ggml_f32 = 0, ggml_f16 = 1, ggml_q8_0 = 8;
constexpr int64_t q8_0_block = 32;
enum : uint32_t {
  t_uint32 = 4,
  t_int32 = 5,
  t_float32 = 6,
  t_bool = 7,
  t_string = 8,
  t_array = 9,
  t_uint64 = 10
};

struct writer {
  std::string out;
  template <class T>
  void pod(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out += s;
  }
  void pad() {
    while (out.size() % alignment)
      out.push_back('\0');
  }
};

struct value_writer {
  writer& w;
  void operator()(uint32_t v) { w.pod(t_uint32), w.pod(v); }
  void operator()(int32_t v) { w.pod(t_int32), w.pod(v); }
  void operator()(uint64_t v) { w.pod(t_uint64), w.pod(v); }
  void operator()(float v) { w.pod(t_float32), w.pod(v); }
  void operator()(bool v) { w.pod(t_bool), w.pod<uint8_t>(v ? 1 : 0); }
  void operator()(const std::string& v) { w.pod(t_string), w.str(v); }
  void operator()(const std::vector<std::string>& v) {
    w.pod(t_array), w.pod(t_string), w.pod<uint64_t>(v.size());
    for (const auto& s : v)
      w.str(s);
  }
  void operator()(const std::vector<float>& v) {
    w.pod(t_array), w.pod(t_float32), w.pod<uint64_t>(v.size());
    for (float f : v)
      w.pod(f);
  }
  void operator()(const std::vector<int32_t>& v) {
    w.pod(t_array), w.pod(t_int32), w.pod<uint64_t>(v.size());
    for (int32_t x : v)
      w.pod(x);
  }
};

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

} // namespace

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31)
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10)
      return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1)))
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1)))
    ++half; // may carry into the exponent, which is right
  return static_cast<uint16_t>(sign | half);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u))
        mant <<= 1, --exp;
      x = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::string quantize_q8_0(const float* x, int64_t n) {
  std::string out;
  out.reserve(n / q8_0_block * (2 + q8_0_block));
  for (int64_t b = 0; b < n; b += q8_0_block) {
    float amax = 0.0f;
    for (int64_t i = 0; i < q8_0_block; ++i)
      amax = std::max(amax, std::fabs(x[b + i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = float_to_half(d);
    out.append(reinterpret_cast<const char*>(&h), 2);
    for (int64_t i = 0; i < q8_0_block; ++i)
      out.push_back(static_cast<char>(static_cast<int8_t>(
        std::roundf(x[b + i] * id))));
  }
  return out;
}

status write_gguf(const std::filesystem::path& file,
                  const std::vector<std::pair<std::string, gguf_value>>& kv,
                  const std::vector<gguf_tensor>& tensors, bool f16) {
  writer w;
  w.out += "GGUF";
  w.pod<uint32_t>(3);
  w.pod<uint64_t>(tensors.size());
  w.pod<uint64_t>(kv.size() + 1);
  w.str("general.alignment");
  value_writer{w}(static_cast<uint32_t>(alignment));
  for (const auto& [key, value] : kv) {
    if (key == "general.alignment")
      return status::error("gguf: general.alignment is set by the writer");
    w.str(key);
    std::visit(value_writer{w}, value);
  }
  // Tensor infos, then the data, each tensor aligned.
  std::vector<std::string> blobs;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const int64_t n = numel(t.shape);
    if (t.name.empty() || t.shape.empty() || n <= 0 || !t.data)
      return status::error("gguf: tensor '" + t.name + "' has no data");
    const bool half = f16 && t.shape.size() >= 2 && !t.q8_0;
    if (t.q8_0 && t.shape.back() % q8_0_block != 0)
      return status::error("gguf: tensor '" + t.name + "' has rows of "
                           + std::to_string(t.shape.back())
                           + " values, not a multiple of 32 (Q8_0)");
    w.str(t.name);
    w.pod<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
      w.pod<uint64_t>(static_cast<uint64_t>(*it));
    w.pod<uint32_t>(t.q8_0 ? ggml_q8_0 : half ? ggml_f16 : ggml_f32);
    w.pod<uint64_t>(offset);
    std::string blob;
    if (t.q8_0) {
      blob = quantize_q8_0(t.data, n);
    } else if (half) {
      blob.resize(n * 2);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = float_to_half(t.data[i]);
        std::memcpy(blob.data() + 2 * i, &h, 2);
      }
    } else {
      blob.assign(reinterpret_cast<const char*>(t.data), n * 4);
    }
    while (blob.size() % alignment)
      blob.push_back('\0');
    offset += blob.size();
    blobs.push_back(std::move(blob));
  }
  w.pad();
  std::vector<std::span<const std::byte>> parts;
  parts.push_back(std::as_bytes(std::span(w.out.data(), w.out.size())));
  for (const auto& b : blobs)
    parts.push_back(std::as_bytes(std::span(b.data(), b.size())));
  return write_file_atomic_parts(file, parts);
}

} // namespace tutti::store
