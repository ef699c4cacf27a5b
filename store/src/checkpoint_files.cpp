// Shard files: see checkpoint_files.hpp for the layout.
#include "tutti/store/checkpoint_files.hpp"

#include <bit>
#include <cstdio>
#include <cstring>
#include <set>
#include <span>

#include "file_io.hpp"
#include "msgpack_util.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/checksum.hpp"

namespace tutti::store {
namespace {

// Tensors are written and read as raw memory; the format is little-endian.
static_assert(std::endian::native == std::endian::little,
              "shard files assume a little-endian host");

constexpr char magic[8] = {'T', 'U', 'T', 'T', 'I', 'C', 'K', 'P'};
constexpr std::uint64_t fixed_prefix = 16; // magic + version + header length

// Bytes of an f32 tensor of `shape`, or false on a negative dim or overflow.
bool f32_bytes(const std::vector<std::int64_t>& shape, std::uint64_t& out) {
  out = 4;
  for (auto d : shape)
    if (d < 0
        || __builtin_mul_overflow(out, static_cast<std::uint64_t>(d), &out))
      return false;
  return true;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string at(std::uint64_t offset) {
  return " at offset " + std::to_string(offset);
}

// Parses and checks everything but the tensor bytes themselves.
expected<shard_file> read_header(const detail::input_file& in) {
  const std::string name = in.path().string();
  auto fail = [&](const std::string& what) {
    return status::error(name + ": " + what);
  };
  if (in.size() < fixed_prefix + 8)
    return fail("truncated: " + std::to_string(in.size())
                + " bytes, shorter than the 24-byte fixed header");
  unsigned char prefix[fixed_prefix];
  TUTTI_RETURN_IF_ERROR(in.read_at(0, prefix, fixed_prefix));
  if (std::memcmp(prefix, magic, sizeof magic) != 0)
    return fail("bad magic" + at(0) + " (not a tutti checkpoint shard)");
  auto version = static_cast<std::uint32_t>(detail::get_le(prefix + 8, 4));
  if (version != shard_format_version)
    return fail("unsupported shard format version " + std::to_string(version)
                + at(8) + " (this build reads "
                + std::to_string(shard_format_version) + ")");
  std::uint64_t h = detail::get_le(prefix + 12, 4);
  shard_file out;
  out.data_offset = fixed_prefix + h + 8;
  if (out.data_offset > in.size())
    return fail("truncated: header length " + std::to_string(h) + at(12)
                + " runs past the end of the file (" + std::to_string(in.size())
                + " bytes)");
  std::string header(h + 8, '\0');
  TUTTI_RETURN_IF_ERROR(in.read_at(fixed_prefix, header.data(), header.size()));
  std::uint64_t stored = detail::get_le(
    reinterpret_cast<const unsigned char*>(header.data()) + h, 8);
  std::uint64_t computed = xxh64(header.data(), h);
  if (stored != computed)
    return fail("header hash mismatch" + at(fixed_prefix + h) + ": stored "
                + detail::hex64(stored) + ", computed "
                + detail::hex64(computed) + " over bytes [16, "
                + std::to_string(fixed_prefix + h) + ")");
  auto oh = detail::mp::unpack(header.data(), h);
  if (!oh.ok())
    return fail("bad header" + at(fixed_prefix) + ": " + oh.message());
  const msgpack::object& m = oh.value().get();
  auto bad = [&](const std::string& what) {
    return fail("bad header" + at(fixed_prefix) + ": " + what);
  };

  shard_meta& meta = out.meta;
  const msgpack::object* ints = detail::mp::field(m, "ints");
  const msgpack::object* strings = detail::mp::field(m, "strings");
  const msgpack::object* tensors = detail::mp::field(m, "tensors");
  if (!detail::mp::get(m, "rank", meta.rank)
      || !detail::mp::get(m, "step", meta.step)
      || !detail::mp::get(m, "epoch", meta.epoch) || ints == nullptr
      || ints->type != msgpack::type::MAP || strings == nullptr
      || strings->type != msgpack::type::MAP || tensors == nullptr
      || tensors->type != msgpack::type::ARRAY)
    return bad("missing or mistyped rank/step/epoch/ints/strings/tensors");
  for (std::uint32_t i = 0; i < ints->via.map.size; ++i) {
    std::string k;
    std::int64_t v = 0;
    if (!detail::mp::as_str(ints->via.map.ptr[i].key, k)
        || !detail::mp::as_int(ints->via.map.ptr[i].val, v))
      return bad("ints must map strings to integers");
    meta.ints[k] = v;
  }
  for (std::uint32_t i = 0; i < strings->via.map.size; ++i) {
    std::string k, v;
    if (!detail::mp::as_str(strings->via.map.ptr[i].key, k)
        || !detail::mp::as_str(strings->via.map.ptr[i].val, v))
      return bad("strings must map strings to strings");
    meta.strings[k] = std::move(v);
  }

  std::set<std::string> names;
  std::uint64_t next = 0; // tensors are contiguous in header order
  for (std::uint32_t i = 0; i < tensors->via.array.size; ++i) {
    const msgpack::object& t = tensors->via.array.ptr[i];
    loaded_tensor lt;
    std::uint64_t offset = 0, bytes = 0, expect = 0;
    const msgpack::object* shape = detail::mp::field(t, "shape");
    if (!detail::mp::get(t, "name", lt.name)
        || !detail::mp::get(t, "dtype", lt.dtype)
        || !detail::mp::get(t, "offset", offset)
        || !detail::mp::get(t, "bytes", bytes)
        || !detail::mp::get(t, "xxh64", lt.xxh64) || shape == nullptr
        || shape->type != msgpack::type::ARRAY)
      return bad("tensor #" + std::to_string(i)
                 + ": missing or mistyped name/dtype/shape/offset/bytes/xxh64");
    for (std::uint32_t d = 0; d < shape->via.array.size; ++d) {
      std::int64_t dim = 0;
      if (!detail::mp::as_int(shape->via.array.ptr[d], dim))
        return bad("tensor '" + lt.name + "': non-integer dim");
      lt.shape.push_back(dim);
    }
    if (!names.insert(lt.name).second)
      return bad("duplicate tensor name '" + lt.name + "'");
    if (lt.dtype != "f32")
      return bad("tensor '" + lt.name + "': unsupported dtype '" + lt.dtype
                 + "'");
    if (!f32_bytes(lt.shape, expect) || expect != bytes)
      return bad("tensor '" + lt.name + "': " + std::to_string(bytes)
                 + " bytes do not match f32 shape " + shape_text(lt.shape));
    if (offset != next)
      return bad("tensor '" + lt.name + "': data offset "
                 + std::to_string(offset) + ", expected " + std::to_string(next)
                 + " (tensors are contiguous)");
    std::uint64_t begin = out.data_offset + offset;
    if (begin + bytes > in.size() || begin + bytes < begin)
      return fail("truncated: tensor '" + lt.name + "' spans bytes ["
                  + std::to_string(begin) + ", " + std::to_string(begin + bytes)
                  + ") but the file has " + std::to_string(in.size())
                  + " bytes");
    next = offset + bytes;
    out.offsets.push_back(begin);
    out.tensors.push_back(std::move(lt));
  }
  if (out.data_offset + next != in.size())
    return fail(std::to_string(in.size() - out.data_offset - next)
                + " unexpected bytes after the last tensor"
                + at(out.data_offset + next));
  return out;
}

std::string hash_mismatch(const shard_file& s, std::size_t i,
                          std::uint64_t computed, const std::string& file) {
  const auto& t = s.tensors[i];
  std::uint64_t bytes = 0;
  f32_bytes(t.shape, bytes); // validated by read_header
  std::uint64_t begin = s.offsets[i], end = begin + bytes;
  return file + ": tensor '" + t.name + "' data hash mismatch" + at(begin)
         + " (bytes [" + std::to_string(begin) + ", " + std::to_string(end)
         + ")): stored xxh64 " + detail::hex64(t.xxh64) + ", computed "
         + detail::hex64(computed);
}

} // namespace

std::string checkpoint_dir_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string shard_file_name(std::int64_t rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05lld.ckpt",
                static_cast<long long>(rank));
  return buf;
}

expected<std::uint64_t> write_shard_file(
  const std::filesystem::path& file, const shard_meta& meta,
  const std::vector<tensor_view>& tensors) {
  auto fail = [&](const std::string& what) {
    return status::error(file.string() + ": " + what);
  };
  msgpack::sbuffer header;
  detail::mp::packer pk(header);
  pk.pack_map(6);
  detail::mp::key(pk, "rank"), pk.pack(meta.rank);
  detail::mp::key(pk, "step"), pk.pack(meta.step);
  detail::mp::key(pk, "epoch"), pk.pack(meta.epoch);
  detail::mp::key(pk, "ints"), pk.pack(meta.ints);
  detail::mp::key(pk, "strings"), pk.pack(meta.strings);
  detail::mp::key(pk, "tensors"),
    pk.pack_array(static_cast<std::uint32_t>(tensors.size()));
  std::vector<std::span<const std::byte>> parts(
    1); // [0] = the prefix, filled below
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    std::uint64_t bytes = 0;
    if (t.name.empty() || !names.insert(t.name).second)
      return fail("empty or duplicate tensor name '" + t.name + "'");
    if (!f32_bytes(t.shape, bytes))
      return fail("tensor '" + t.name + "': bad shape " + shape_text(t.shape));
    if (bytes > 0 && t.data == nullptr)
      return fail("tensor '" + t.name + "': no data");
    pk.pack_map(6);
    detail::mp::key(pk, "name"), pk.pack(t.name);
    detail::mp::key(pk, "shape"), pk.pack(t.shape);
    detail::mp::key(pk, "dtype"), pk.pack(std::string("f32"));
    detail::mp::key(pk, "offset"), pk.pack(offset);
    detail::mp::key(pk, "bytes"), pk.pack(bytes);
    // Hashed from the snapshot in memory before writing: a byte that changes
    // on its way to the disk is caught when the shard is read back.
    detail::mp::key(pk, "xxh64"), pk.pack(xxh64(t.data, bytes));
    parts.push_back(std::as_bytes(std::span(t.data, bytes / 4)));
    offset += bytes;
  }
  if (header.size() > UINT32_MAX)
    return fail("header too large");
  std::string prefix(magic, sizeof magic);
  detail::put_le(prefix, shard_format_version, 4);
  detail::put_le(prefix, header.size(), 4);
  prefix.append(header.data(), header.size());
  detail::put_le(prefix, xxh64(header.data(), header.size()), 8);
  parts[0] = std::as_bytes(std::span(prefix.data(), prefix.size()));
  TUTTI_RETURN_IF_ERROR(create_directories_durable(file.parent_path()));
  TUTTI_RETURN_IF_ERROR(write_file_atomic_parts(file, parts));
  return prefix.size() + offset;
}

expected<shard_file> read_shard_file(const std::filesystem::path& file,
                                     bool load_data) {
  auto in = detail::input_file::open(file);
  if (!in.ok())
    return in.error();
  auto s = read_header(in.value());
  if (!s.ok() || !load_data)
    return s;
  for (std::size_t i = 0; i < s.value().tensors.size(); ++i) {
    auto& t = s.value().tensors[i];
    std::uint64_t bytes = 0;
    f32_bytes(t.shape, bytes);
    t.data.resize(bytes / 4);
    TUTTI_RETURN_IF_ERROR(
      in.value().read_at(s.value().offsets[i], t.data.data(), bytes));
    std::uint64_t computed = xxh64(t.data.data(), bytes);
    if (computed != t.xxh64)
      return status::error(
        hash_mismatch(s.value(), i, computed, file.string()));
  }
  return s;
}

expected<shard_file> verify_shard_file(const std::filesystem::path& file,
                                       std::uint64_t* file_xxh64) {
  auto in = detail::input_file::open(file);
  if (!in.ok())
    return in.error();
  auto s = read_header(in.value());
  if (!s.ok())
    return s;
  // Tensors are contiguous up to the end of the file (read_header checked).
  std::vector<std::uint64_t> cuts = s.value().offsets;
  cuts.push_back(in.value().size());
  auto h = in.value().hash_file(cuts);
  if (!h.ok())
    return h.error();
  for (std::size_t i = 0; i < s.value().tensors.size(); ++i)
    if (h.value().segments[i] != s.value().tensors[i].xxh64)
      return status::error(
        hash_mismatch(s.value(), i, h.value().segments[i], file.string()));
  if (file_xxh64 != nullptr)
    *file_xxh64 = h.value().whole;
  return s;
}

} // namespace tutti::store
