#pragma once
// Crash-safe whole-file writes: a reader sees either the old file or the
// complete new one, never a prefix, and the new one survives power loss once
// this returns success.

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "tutti/base/status.hpp"

namespace tutti::store {

// Writes `bytes` to `path`.tmp, fsyncs it, renames it over `path`, then
// fsyncs the parent directory so the rename itself is durable. On failure the
// temporary file is removed and the message names the path and errno text.
status write_file_atomic(const std::filesystem::path& path,
                         std::span<const std::byte> bytes);
status write_file_atomic(const std::filesystem::path& path,
                         std::string_view bytes);

// Same contract, but the file is the concatenation of `parts`, written in
// order straight from the caller's memory: large tensors need no staging copy.
status write_file_atomic_parts(
  const std::filesystem::path& path,
  std::span<const std::span<const std::byte>> parts);

// Creates `dir` and any missing parents, fsyncing the parent of every
// directory it creates: a fresh checkpoint directory must survive power loss
// just like the files in it. Existing directories are left alone.
status create_directories_durable(const std::filesystem::path& dir);

// fsync of a directory: makes the creation, rename or removal of entries in
// it durable. The error names the directory and errno text.
status fsync_directory(const std::filesystem::path& dir);

// Reads a whole file; the error names the path and errno text.
expected<std::string> read_file(const std::filesystem::path& path);

} // namespace tutti::store
