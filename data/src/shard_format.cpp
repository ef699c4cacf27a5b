#include "tutti/data/shard_format.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "mapped_file.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/checksum.hpp"

namespace tutti::data {
namespace {

// Byte-wise little-endian access: the format is fixed regardless of host.
void put_le(std::string& out, std::uint64_t v, int width) {
  for (int i = 0; i < width; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_le(std::string_view bytes, std::size_t offset, int width) {
  std::uint64_t v = 0;
  for (int i = 0; i < width; ++i)
    v |=
      static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[offset + i]))
      << (8 * i);
  return v;
}

constexpr std::size_t header_hashed_size = 40; // header checksum covers [0, 40)

// Little-endian tokens of type T (on a little-endian host) into ids;
// returns the largest.
template <class T>
std::uint32_t widen(const char* bytes, std::uint64_t count, std::int32_t* out) {
  std::uint32_t largest = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    T t;
    std::memcpy(&t, bytes + i * sizeof(T), sizeof(T));
    largest = std::max<std::uint32_t>(largest, t);
    out[i] = static_cast<std::int32_t>(t);
  }
  return largest;
}

} // namespace

std::uint32_t token_width_for(std::uint32_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

expected<std::string> encode_shard(const std::vector<std::int32_t>& tokens,
                                   std::uint32_t vocab_size,
                                   std::uint32_t token_width) {
  if (token_width == 0)
    token_width = token_width_for(vocab_size);
  if (vocab_size == 0)
    return status::error("encode_shard: vocab_size must be > 0");
  if (token_width != 2 && token_width != 4)
    return status::error("encode_shard: token_width must be 2 or 4, got "
                         + std::to_string(token_width));
  if (token_width < token_width_for(vocab_size) || vocab_size > 0x80000000u)
    return status::error("encode_shard: vocab_size "
                         + std::to_string(vocab_size) + " does not fit in "
                         + std::to_string(token_width) + "-byte tokens");

  std::string body;
  body.reserve(tokens.size() * token_width);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::int32_t t = tokens[i];
    if (t < 0 || static_cast<std::uint32_t>(t) >= vocab_size)
      return status::error("encode_shard: token " + std::to_string(t)
                           + " at index " + std::to_string(i)
                           + " is outside [0, " + std::to_string(vocab_size)
                           + ")");
    put_le(body, static_cast<std::uint32_t>(t), static_cast<int>(token_width));
  }

  std::string out(shard_magic);
  put_le(out, shard_version, 4);
  put_le(out, vocab_size, 4);
  put_le(out, token_width, 4);
  put_le(out, 0, 4); // reserved
  put_le(out, tokens.size(), 8);
  put_le(out, store::xxh64(body.data(), body.size()), 8);
  put_le(out, store::xxh64(out.data(), header_hashed_size), 8);
  out += body;
  return out;
}

expected<shard> decode_shard(std::string_view bytes, std::string_view name) {
  const std::string file(name);
  auto refuse = [&](std::size_t offset, const std::string& what) {
    return status::error(file + ": " + what + " at offset "
                         + std::to_string(offset));
  };
  const std::size_t size = bytes.size();

  if (size < shard_magic.size()
      || bytes.substr(0, shard_magic.size()) != shard_magic) {
    if (size < shard_magic.size() && bytes == shard_magic.substr(0, size))
      return status::error(file + ": truncated at offset "
                           + std::to_string(size) + ": header needs "
                           + std::to_string(shard_header_size)
                           + " bytes but the file has " + std::to_string(size));
    return refuse(0, "bad magic (not a TUTTITOK shard)");
  }
  if (size < shard_header_size)
    return status::error(file + ": truncated at offset " + std::to_string(size)
                         + ": header needs " + std::to_string(shard_header_size)
                         + " bytes but the file has " + std::to_string(size));

  const auto version = static_cast<std::uint32_t>(get_le(bytes, 8, 4));
  if (version != shard_version)
    return refuse(8, "unsupported version " + std::to_string(version)
                       + " (expected " + std::to_string(shard_version) + ")");
  if (get_le(bytes, 40, 8) != store::xxh64(bytes.data(), header_hashed_size))
    return status::error(
      file + ": header checksum mismatch [offset 0..40] (stored at offset 40)");

  shard out;
  out.vocab_size = static_cast<std::uint32_t>(get_le(bytes, 12, 4));
  out.token_width = static_cast<std::uint32_t>(get_le(bytes, 16, 4));
  // A valid header checksum over bad fields means a buggy writer, not bit rot.
  if (out.vocab_size == 0 || out.vocab_size > 0x80000000u)
    return refuse(12, "bad vocab_size " + std::to_string(out.vocab_size));
  if (out.token_width != 2 && out.token_width != 4)
    return refuse(16, "bad token_width " + std::to_string(out.token_width)
                        + " (expected 2 or 4)");
  if (out.token_width < token_width_for(out.vocab_size))
    return refuse(16, "token_width " + std::to_string(out.token_width)
                        + " cannot hold vocab_size "
                        + std::to_string(out.vocab_size));
  if (get_le(bytes, 20, 4) != 0)
    return refuse(20, "reserved field is not zero");

  const std::uint64_t count = get_le(bytes, 24, 8);
  const std::uint64_t follow = size - shard_header_size;
  const std::uint64_t width = out.token_width;
  // Compare without multiplying first: count * width may overflow.
  if (count > follow / width || count * width != follow) {
    const std::string claim = "header says " + std::to_string(count) + " tokens"
                              + (count <= UINT64_MAX / width
                                   ? " (" + std::to_string(count * width)
                                       + " bytes)"
                                   : "");
    if (count > follow / width)
      return status::error(file + ": truncated at offset "
                           + std::to_string(size) + ": " + claim + " but "
                           + std::to_string(follow) + " bytes follow");
    return status::error(file + ": trailing garbage at offset "
                         + std::to_string(shard_header_size + count * width)
                         + ": " + claim + " but " + std::to_string(follow)
                         + " bytes follow");
  }

  const std::string_view body = bytes.substr(shard_header_size);
  if (get_le(bytes, 32, 8) != store::xxh64(body.data(), body.size()))
    return status::error(file + ": checksum mismatch in tokens [offset "
                         + std::to_string(shard_header_size) + ".."
                         + std::to_string(size) + "]");

  // Widen first and check the largest id after: a loop the compiler
  // vectorises; only a bad shard pays for finding which token was bad.
  out.tokens.resize(count);
  std::uint32_t largest = 0;
  if constexpr (std::endian::native == std::endian::little) {
    if (width == 2)
      largest = widen<std::uint16_t>(body.data(), count, out.tokens.data());
    else
      largest = widen<std::uint32_t>(body.data(), count, out.tokens.data());
  } else {
    for (std::uint64_t i = 0; i < count; ++i) {
      const auto t = static_cast<std::uint32_t>(
        get_le(body, i * width, static_cast<int>(width)));
      largest = std::max(largest, t);
      out.tokens[i] = static_cast<std::int32_t>(t);
    }
  }
  if (largest >= out.vocab_size)
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t t = get_le(body, i * width, static_cast<int>(width));
      if (t >= out.vocab_size)
        return refuse(shard_header_size + i * width,
                      "token " + std::to_string(t) + " (index "
                        + std::to_string(i) + ") >= vocab_size "
                        + std::to_string(out.vocab_size));
    }
  return out;
}

status write_shard(const std::filesystem::path& path,
                   const std::vector<std::int32_t>& tokens,
                   std::uint32_t vocab_size, std::uint32_t token_width) {
  auto encoded = encode_shard(tokens, vocab_size, token_width);
  if (!encoded.ok())
    return status::error(path.string() + ": " + encoded.message());
  return store::write_file_atomic(path, encoded.value());
}

expected<shard> read_shard(const std::filesystem::path& path) {
  auto mapped = mapped_file::open(path);
  if (!mapped.ok())
    return mapped.error();
  return decode_shard(mapped.value().bytes(), path.string());
}

} // namespace tutti::data
