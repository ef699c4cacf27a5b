#pragma once
// Internal: msgpack encode/decode helpers shared by the job store's records
// and the checkpoint shard header. Records are msgpack maps keyed by field
// name: readers ignore keys they do not know and a later version can add
// fields without a migration.

#include <msgpack.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "tutti/base/status.hpp"

namespace tutti::store::detail::mp {

using packer = msgpack::packer<msgpack::sbuffer>;

inline void key(packer& pk, std::string_view k) {
  pk.pack_str(static_cast<std::uint32_t>(k.size()));
  pk.pack_str_body(k.data(), static_cast<std::uint32_t>(k.size()));
}

// Parses exactly one value spanning all of [data, data + size). Container
// and string lengths are capped at `size` (each element needs >= 1 byte), so
// a corrupt length prefix cannot make the parser allocate gigabytes. The
// error is the parser's reason; the caller adds file and offset.
inline expected<msgpack::object_handle> unpack(const char* data,
                                               std::size_t size) {
  try {
    std::size_t off = 0;
    msgpack::unpack_limit limit(size, size, size, size, size, 32);
    msgpack::object_handle oh = msgpack::unpack(data, size, off, nullptr,
                                                nullptr, limit);
    if (off != size)
      return status::error("msgpack value ends at byte " + std::to_string(off)
                           + " of " + std::to_string(size));
    return oh;
  } catch (const std::exception& e) {
    return status::error(std::string("invalid msgpack: ") + e.what());
  }
}

// Map member by key, or nullptr when absent or when `map` is not a map.
inline const msgpack::object* field(const msgpack::object& map,
                                    std::string_view k) {
  if (map.type != msgpack::type::MAP)
    return nullptr;
  for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR
        && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == k)
      return &kv.val;
  }
  return nullptr;
}

inline bool as_int(const msgpack::object& o, std::int64_t& out) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER)
    return out = o.via.i64, true;
  if (o.type == msgpack::type::POSITIVE_INTEGER && o.via.u64 <= INT64_MAX)
    return out = static_cast<std::int64_t>(o.via.u64), true;
  return false;
}

inline bool as_str(const msgpack::object& o, std::string& out) {
  if (o.type != msgpack::type::STR)
    return false;
  out.assign(o.via.str.ptr, o.via.str.size);
  return true;
}

// Typed getters: false when the key is missing or has another type.
inline bool get(const msgpack::object& map, std::string_view k,
                std::int64_t& out) {
  const auto* o = field(map, k);
  return o != nullptr && as_int(*o, out);
}
inline bool get(const msgpack::object& map, std::string_view k,
                std::uint64_t& out) {
  const auto* o = field(map, k);
  if (o == nullptr || o->type != msgpack::type::POSITIVE_INTEGER)
    return false;
  out = o->via.u64;
  return true;
}
inline bool get(const msgpack::object& map, std::string_view k,
                std::string& out) {
  const auto* o = field(map, k);
  return o != nullptr && as_str(*o, out);
}
inline bool get(const msgpack::object& map, std::string_view k, double& out) {
  const auto* o = field(map, k);
  if (o == nullptr)
    return false;
  if (o->type == msgpack::type::FLOAT64 || o->type == msgpack::type::FLOAT32)
    return out = o->via.f64, true;
  std::int64_t i = 0;
  if (as_int(*o, i))
    return out = static_cast<double>(i), true;
  return false;
}

} // namespace tutti::store::detail::mp
