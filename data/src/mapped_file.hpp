#pragma once
// A file mapped read-only into memory: shards are verified and widened
// straight from the page cache, without first copying them into a buffer.

#include <cstddef>
#include <filesystem>
#include <string_view>

#include "tutti/base/status.hpp"

namespace tutti::data {

class mapped_file {
public:
  // Maps the whole file and tells the kernel it is read once, in order.
  static expected<mapped_file> open(const std::filesystem::path& path);
  mapped_file(mapped_file&& other) noexcept;
  mapped_file& operator=(mapped_file&& other) noexcept;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file();

  std::string_view bytes() const {
    return {static_cast<const char*>(data_), size_};
  }

private:
  mapped_file() = default;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// Asks the kernel to read `path` into its page cache in the background
// (posix_fadvise WILLNEED); returns the file's size. Advice only: nothing
// waits for it.
expected<std::uint64_t> read_ahead(const std::filesystem::path& path);

} // namespace tutti::data
