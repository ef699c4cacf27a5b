#pragma once
// Published model versions: `tutti publish` copies a checkpoint or export
// directory into REGISTRY/NAME/VERSION/model and records the SHA-256 and
// size of every file in REGISTRY/NAME/VERSION/version.json. A version is
// immutable: publishing the same name and version again with the same bytes
// is a no-op, with other bytes it is refused. A service that names a
// version (serve.model_version, serve.registry) loads it only after every
// file is checked against the record; a changed, missing or extra file is
// refused in one line naming it.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/serve_config.hpp"
#include "tutti/config/version_ref.hpp"

namespace tutti::serve {

struct published_file {
  std::string path; // relative to the version's model directory
  int64_t bytes = 0;
  std::string sha256; // hex
};

struct model_version {
  std::string name, version;
  std::string source;            // the directory it was published from
  int64_t published_unix_ms = 0;
  std::vector<published_file> files; // sorted by path
  std::filesystem::path model_dir;   // REGISTRY/NAME/VERSION/model
  bool existed = false; // publish: the same bytes were already published
};

// Registers `source` (a directory load_model accepts) as name@version.
expected<model_version> publish_model(const std::filesystem::path& registry,
                                      const std::filesystem::path& source,
                                      const std::string& name,
                                      const std::string& version);

// The record of name@version, every file checked against it.
expected<model_version> verify_model_version(
  const std::filesystem::path& registry, const std::string& name,
  const std::string& version);

// Every version in the registry (records only, files not hashed).
expected<std::vector<model_version>> list_model_versions(
  const std::filesystem::path& registry);

// The directory to load: serve.model, or serve.model_version's files in the
// registry once every one matches its recorded hash (the first that does
// not is named). Sets cfg.model_name to the version's name if none is set.
expected<std::string> served_model_dir(serve_config& cfg);

} // namespace tutti::serve
