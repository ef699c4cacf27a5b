#pragma once
// Internal: positional reads of files whose contents we do not trust yet.
// Every error names the file and the offset, so an operator knows which byte
// range of which file to look at.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::store::detail {

class input_file {
public:
  input_file() = default;
  input_file(input_file&& other) noexcept;
  input_file& operator=(input_file&& other) noexcept;
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;
  ~input_file();

  // Opens read-only and records the size once, so later range checks and the
  // reads agree even if someone appends meanwhile.
  static expected<input_file> open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  std::uint64_t size() const { return size_; }

  // Reads exactly `n` bytes at `offset`; a short read is reported as
  // truncation at the offset where the data ran out.
  status read_at(std::uint64_t offset, void* dst, std::uint64_t n) const;

  // xxh64 of [offset, offset + n), streamed through a bounded buffer so that
  // verifying a multi-GB shard does not need that much memory.
  expected<std::uint64_t> hash_range(std::uint64_t offset,
                                     std::uint64_t n) const;

  // One sequential pass over the whole file: its xxh64, and the xxh64 of
  // each segment [cuts[i], cuts[i+1]) (cuts ascending, none past the end).
  // Verifying a shard then reads its bytes once, not once per check.
  struct pass_hashes {
    std::uint64_t whole = 0;
    std::vector<std::uint64_t> segments;
  };
  expected<pass_hashes> hash_file(const std::vector<std::uint64_t>& cuts) const;

private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Little-endian fixed-width fields of the on-disk formats.
inline void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline std::uint64_t get_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

// "0123456789abcdef": hashes travel as fixed-width hex text in JSON so that
// no parser rounds them through a double.
std::string hex64(std::uint64_t v);
bool parse_hex64(const std::string& s, std::uint64_t& out);

} // namespace tutti::store::detail
