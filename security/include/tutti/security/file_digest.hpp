#pragma once
// SHA-256 of a file's bytes, streamed through a bounded buffer: the
// identity of a published model version's files (serve/'s model
// registry), where a checksum against corruption is not enough and the
// bytes must be the ones that were published.

#include <filesystem>
#include <string>

#include "tutti/base/status.hpp"

namespace tutti::security {

// Hex SHA-256 of the file at `path`; the error names the path.
expected<std::string> sha256_file(const std::filesystem::path& path);

} // namespace tutti::security
