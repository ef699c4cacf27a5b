#include "tutti/store/safetensors.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <span>

#include "file_io.hpp"
#include "json.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/gguf.hpp"

namespace tutti::store {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian");

// The reference implementation refuses larger headers; so do we, before
// allocating anything a corrupt length asks for.
constexpr std::uint64_t max_header_bytes = 100'000'000;

bool element_count(const std::vector<std::int64_t>& shape, std::uint64_t& out) {
  out = 1;
  for (auto d : shape)
    if (d < 0
        || __builtin_mul_overflow(out, static_cast<std::uint64_t>(d), &out))
      return false;
  return out <= UINT64_MAX / 4;
}

struct entry {
  std::string name;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;
  std::string dtype; // F32, or F16 / BF16 / I8 / F8_E4M3 when widening
};

// The e4m3 byte whose value is `v` exactly (NaN: 0x7F), or -1.
int fp8_e4m3_code(float v) {
  static const auto codes = [] {
    std::map<std::uint32_t, std::uint8_t> out;
    for (int c = 0; c < 256; ++c)
      if (const float x = fp8_e4m3_value(std::uint8_t(c)); !std::isnan(x))
        out[std::bit_cast<std::uint32_t>(x)] = std::uint8_t(c);
    return out;
  }();
  if (std::isnan(v))
    return 0x7F;
  const auto it = codes.find(std::bit_cast<std::uint32_t>(v));
  return it == codes.end() ? -1 : it->second;
}

} // namespace

float fp8_e4m3_value(std::uint8_t code) {
  const int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7)
    return std::numeric_limits<float>::quiet_NaN();
  // Exponent 0: subnormal, m * 2^-9; else (8 + m) * 2^(e - 7 - 3).
  const float magnitude = exponent == 0
                            ? std::ldexp(float(mantissa), -9)
                            : std::ldexp(float(8 + mantissa), exponent - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

status write_safetensors(const std::filesystem::path& file,
                         const std::vector<named_tensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  auto fail = [&](const std::string& what) -> status {
    return status::error(file.string() + ": " + what);
  };
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it)
      header += (it == metadata.begin() ? "" : ",")
                + detail::json::quote(it->first) + ":"
                + detail::json::quote(it->second);
    header += "}";
  }
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    std::uint64_t n = 0;
    if (t.name.empty() || t.name == "__metadata__"
        || !names.insert(t.name).second)
      return fail("tensor name '" + t.name
                  + "' is empty, reserved or duplicated");
    if (!element_count(t.shape, n) || n != t.data.size())
      return fail("tensor '" + t.name + "' has " + std::to_string(t.data.size())
                  + " values, its shape wants " + std::to_string(n));
    if (t.int8 && t.fp8_e4m3)
      return fail("tensor '" + t.name + "' is marked both int8 and fp8_e4m3");
    if (t.int8)
      for (float v : t.data)
        if (!(v >= -128.0f && v <= 127.0f) || v != std::nearbyint(v))
          return fail("tensor '" + t.name + "' is int8 but holds "
                      + std::to_string(v));
    if (t.fp8_e4m3)
      for (float v : t.data)
        if (fp8_e4m3_code(v) < 0)
          return fail("tensor '" + t.name + "' is fp8_e4m3 but holds "
                      + std::to_string(v) + " (not an e4m3 value)");
    const bool byte = t.int8 || t.fp8_e4m3;
    const std::uint64_t bytes = n * (byte ? 1 : 4);
    if (header.size() > 1)
      header += ",";
    header += detail::json::quote(t.name) + ":{\"dtype\":\""
              + (t.int8       ? "I8"
                 : t.fp8_e4m3 ? "F8_E4M3"
                              : "F32")
              + "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i)
      header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + ","
              + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  // Never write a file we would refuse to read (e.g. a name that is not UTF-8).
  if (auto check = detail::json::parse(header); !check.ok())
    return fail("tensor names and metadata must be valid UTF-8 text ("
                + check.message() + ")");
  header.append((8 - header.size() % 8) % 8, ' '); // data starts 8-byte aligned
  std::string prefix;
  detail::put_le(prefix, header.size(), 8);
  prefix += header;
  std::vector<std::span<const std::byte>> parts{
    std::as_bytes(std::span(prefix.data(), prefix.size()))};
  std::vector<std::vector<std::int8_t>> codes; // the 8-bit tensors' bytes
  codes.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (t.int8) {
      auto& c = codes.emplace_back(t.data.begin(), t.data.end());
      parts.push_back(std::as_bytes(std::span(c)));
    } else if (t.fp8_e4m3) {
      auto& c = codes.emplace_back(t.data.size());
      for (std::size_t i = 0; i < t.data.size(); ++i)
        c[i] = static_cast<std::int8_t>(fp8_e4m3_code(t.data[i]));
      parts.push_back(std::as_bytes(std::span(c)));
    } else {
      parts.push_back(std::as_bytes(std::span(t.data)));
    }
  }
  if (auto err = create_directories_durable(file.parent_path()); !err)
    return err;
  return write_file_atomic_parts(file, parts);
}

namespace {

// The reader of every entry point; `widen`: F16, BF16, I8 and F8_E4M3 are
// accepted and converted to float. Each tensor `keep` takes (all without it) goes to
// `sink` as soon as it is read, in header order.
status read_impl(const std::filesystem::path& file,
                 std::map<std::string, std::string>* metadata, bool widen,
                 const tensor_filter* keep, const tensor_sink& sink) {
  auto fail = [&](const std::string& what) {
    return status::error(file.string() + ": " + what);
  };
  auto in = detail::input_file::open(file);
  if (!in.ok())
    return in.error();
  const std::uint64_t size = in.value().size();
  if (size < 8)
    return fail("truncated: " + std::to_string(size)
                + " bytes, shorter than the 8-byte header length");
  unsigned char len[8];
  TUTTI_RETURN_IF_ERROR(in.value().read_at(0, len, 8));
  const std::uint64_t n = detail::get_le(len, 8);
  if (n > max_header_bytes)
    return fail("header length " + std::to_string(n)
                + " at offset 0 exceeds the 100 MB limit");
  if (n > size - 8)
    return fail("header length " + std::to_string(n)
                + " at offset 0 runs past the end of the file ("
                + std::to_string(size) + " bytes)");
  std::string header(n, '\0');
  TUTTI_RETURN_IF_ERROR(in.value().read_at(8, header.data(), n));
  auto doc = detail::json::parse(header);
  if (!doc.ok())
    return fail("header (file offset 8) is not valid JSON: " + doc.message()
                + " of the header");
  if (doc.value().type != detail::json::value::kind::object)
    return fail("header (file offset 8) is not a JSON object");

  using kind = detail::json::value::kind;
  const std::uint64_t data_start = 8 + n, data_size = size - data_start;
  std::vector<entry> entries;
  if (metadata != nullptr)
    metadata->clear();
  for (std::size_t i = 0; i < doc.value().keys.size(); ++i) {
    const std::string& name = doc.value().keys[i];
    const auto& v = doc.value().items[i];
    if (name == "__metadata__") {
      if (v.type != kind::object)
        return fail("\"__metadata__\" is not an object");
      for (std::size_t j = 0; j < v.keys.size(); ++j) {
        if (v.items[j].type != kind::string)
          return fail("\"__metadata__\" value '" + v.keys[j]
                      + "' is not a string");
        if (metadata != nullptr)
          (*metadata)[v.keys[j]] = v.items[j].text;
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      return fail("tensor '" + name + "': " + what);
    };
    const auto* dtype = v.find("dtype");
    const auto* shape = v.find("shape");
    const auto* offsets = v.find("data_offsets");
    if (dtype == nullptr || dtype->type != kind::string || shape == nullptr
        || shape->type != kind::array || offsets == nullptr
        || offsets->type != kind::array)
      return bad(
        "needs \"dtype\" string, \"shape\" and \"data_offsets\" arrays");
    const bool half = widen && (dtype->text == "F16" || dtype->text == "BF16");
    const bool byte = widen
                      && (dtype->text == "I8" || dtype->text == "F8_E4M3");
    if (dtype->text != "F32" && !half && !byte)
      return bad("dtype " + dtype->text + " is not supported (only F32"
                 + std::string(widen ? ", F16, BF16, I8, F8_E4M3)" : ")"));
    entry e{name, {}, 0, 0, dtype->text};
    for (const auto& d : shape->items) {
      std::int64_t dim = 0;
      if (!d.as_int64(dim) || dim < 0)
        return bad("shape has a non-integer or negative dimension");
      e.shape.push_back(dim);
    }
    if (offsets->items.size() != 2 || !offsets->items[0].as_uint64(e.begin)
        || !offsets->items[1].as_uint64(e.end) || e.begin > e.end)
      return bad("data_offsets must be [begin, end] with begin <= end");
    std::uint64_t count = 0;
    const std::uint64_t width = byte ? 1 : half ? 2 : 4;
    if (!element_count(e.shape, count) || count * width != e.end - e.begin)
      return bad("data_offsets span " + std::to_string(e.end - e.begin)
                 + " bytes, shape needs " + std::to_string(count * width)
                 + " for " + e.dtype);
    entries.push_back(std::move(e));
  }
  // The format rule: sorted by position, the tensors tile the data exactly.
  std::vector<const entry*> by_pos;
  for (const auto& e : entries)
    by_pos.push_back(&e);
  std::stable_sort(
    by_pos.begin(), by_pos.end(), [](const entry* a, const entry* b) {
      return a->begin < b->begin || (a->begin == b->begin && a->end < b->end);
    });
  std::uint64_t covered = 0;
  for (const entry* e : by_pos) {
    if (e->begin != covered)
      return fail(
        "tensor '" + e->name + "' data_offsets begin at "
        + std::to_string(e->begin) + ", expected " + std::to_string(covered)
        + (e->begin > covered ? " (gap)" : " (overlap)") + " at file offset "
        + std::to_string(data_start + std::min(e->begin, covered)));
    covered = e->end;
  }
  if (covered != data_size)
    return fail("tensors cover " + std::to_string(covered)
                + " data bytes but the file holds " + std::to_string(data_size)
                + " after the header (at file offset "
                + std::to_string(data_start) + ")"
                + (covered > data_size ? ": truncated" : ": trailing bytes"));
  for (auto& e : entries) {
    const auto how = e.dtype == "I8"        ? stored_as::int8
                     : e.dtype == "F8_E4M3" ? stored_as::fp8_e4m3
                                            : stored_as::floating;
    if (keep && *keep && !(*keep)(e.name, how))
      continue;
    if (e.dtype == "F32") {
      named_tensor t{e.name, e.shape,
                     std::vector<float>((e.end - e.begin) / 4)};
      TUTTI_RETURN_IF_ERROR(in.value().read_at(data_start + e.begin,
                                               t.data.data(), e.end - e.begin));
      TUTTI_RETURN_IF_ERROR(sink(std::move(t)));
      continue;
    }
    if (e.dtype == "I8") {
      std::vector<std::int8_t> raw(e.end - e.begin);
      TUTTI_RETURN_IF_ERROR(
        in.value().read_at(data_start + e.begin, raw.data(), raw.size()));
      TUTTI_RETURN_IF_ERROR(sink(
        {e.name, e.shape, std::vector<float>(raw.begin(), raw.end()), true}));
      continue;
    }
    if (e.dtype == "F8_E4M3") {
      std::vector<std::uint8_t> raw(e.end - e.begin);
      TUTTI_RETURN_IF_ERROR(
        in.value().read_at(data_start + e.begin, raw.data(), raw.size()));
      // By table: a quarter of the per-byte decode's time.
      static const auto values = [] {
        std::array<float, 256> out;
        for (int c = 0; c < 256; ++c)
          out[c] = fp8_e4m3_value(std::uint8_t(c));
        return out;
      }();
      named_tensor t{e.name, e.shape, std::vector<float>(raw.size())};
      t.fp8_e4m3 = true;
      for (std::size_t i = 0; i < raw.size(); ++i)
        t.data[i] = values[raw[i]];
      TUTTI_RETURN_IF_ERROR(sink(std::move(t)));
      continue;
    }
    std::vector<std::uint16_t> raw((e.end - e.begin) / 2);
    TUTTI_RETURN_IF_ERROR(
      in.value().read_at(data_start + e.begin, raw.data(), e.end - e.begin));
    named_tensor t{e.name, e.shape, std::vector<float>(raw.size())};
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (e.dtype == "F16") {
        t.data[i] = half_to_float(raw[i]);
      } else { // BF16: the high half of a float
        const std::uint32_t bits = std::uint32_t(raw[i]) << 16;
        std::memcpy(&t.data[i], &bits, 4);
      }
    }
    TUTTI_RETURN_IF_ERROR(sink(std::move(t)));
  }
  return {};
}

expected<std::vector<named_tensor>> read_all(
  const std::filesystem::path& file,
  std::map<std::string, std::string>* metadata, bool widen) {
  std::vector<named_tensor> out;
  TUTTI_RETURN_IF_ERROR(
    read_impl(file, metadata, widen, nullptr, [&](named_tensor&& t) {
      out.push_back(std::move(t));
      return status{};
    }));
  return out;
}

} // namespace

expected<std::vector<named_tensor>> read_safetensors(
  const std::filesystem::path& file,
  std::map<std::string, std::string>* metadata) {
  return read_all(file, metadata, false);
}

expected<std::vector<named_tensor>> read_safetensors_as_f32(
  const std::filesystem::path& file,
  std::map<std::string, std::string>* metadata) {
  return read_all(file, metadata, true);
}

} // namespace tutti::store

namespace tutti::store {

status read_safetensors_each(const std::filesystem::path& file,
                             const tensor_filter& keep,
                             const tensor_sink& sink) {
  return read_impl(file, nullptr, true, &keep, sink);
}

} // namespace tutti::store
