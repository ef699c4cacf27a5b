#pragma once
// Token shard files (`*.tok`). Layout, all integers little-endian:
//
//   offset  size  field
//        0     8  magic "TUTTITOK"
//        8     4  u32 version (1)
//       12     4  u32 vocab_size
//       16     4  u32 token_width: bytes per token, 2 or 4
//       20     4  u32 reserved, 0 (keeps the u64 fields 8-byte aligned)
//       24     8  u64 token_count
//       32     8  u64 xxh64 of the token bytes
//       40     8  u64 xxh64 of header bytes [0, 40)
//       48     -  token_count tokens of token_width bytes each
//
// The reader trusts nothing: every refusal is one line naming the file and
// the byte offset where it is wrong.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::data {

inline constexpr std::string_view shard_magic = "TUTTITOK";
inline constexpr std::uint32_t shard_version = 1;
inline constexpr std::size_t shard_header_size = 48;

struct shard {
  std::uint32_t vocab_size = 0;
  std::uint32_t token_width = 0;
  std::vector<std::int32_t> tokens;
};

// The smallest width that holds every id below vocab_size.
std::uint32_t token_width_for(std::uint32_t vocab_size);

// Serializes tokens (each in [0, vocab_size)) into the file format.
// token_width 0 picks token_width_for(vocab_size).
expected<std::string> encode_shard(const std::vector<std::int32_t>& tokens,
                                   std::uint32_t vocab_size,
                                   std::uint32_t token_width = 0);

// Validates and decodes file bytes; `name` appears in error messages.
expected<shard> decode_shard(std::string_view bytes, std::string_view name);

// encode_shard + store::write_file_atomic.
status write_shard(const std::filesystem::path& path,
                   const std::vector<std::int32_t>& tokens,
                   std::uint32_t vocab_size, std::uint32_t token_width = 0);

// store::read_file + decode_shard.
expected<shard> read_shard(const std::filesystem::path& path);

} // namespace tutti::data
