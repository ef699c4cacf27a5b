#include "tutti/serve/model_registry.hpp"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "tutti/security/file_digest.hpp"
#include "tutti/serve/model.hpp"
#include "tutti/store/atomic_file.hpp"

namespace tutti::serve {

namespace fs = std::filesystem;

namespace {

const char* record_file = "version.json";

// Every regular file under `dir`, hashed, sorted by relative path.
expected<std::vector<published_file>> hash_tree(const fs::path& dir) {
  std::vector<published_file> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec))
      continue;
    auto h = security::sha256_file(it->path());
    if (!h)
      return h.error();
    out.push_back({fs::relative(it->path(), dir).string(),
                   static_cast<int64_t>(it->file_size(ec)), h.value()});
  }
  if (ec)
    return status::error(dir.string() + ": " + ec.message());
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

nlohmann::json to_json(const model_version& v) {
  nlohmann::json j;
  j["name"] = v.name;
  j["version"] = v.version;
  j["source"] = v.source;
  j["published_unix_ms"] = v.published_unix_ms;
  j["files"] = nlohmann::json::array();
  for (const auto& f : v.files)
    j["files"].push_back(
      {{"path", f.path}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  return j;
}

expected<model_version> read_record(const fs::path& version_dir) {
  const auto file = version_dir / record_file;
  auto text = store::read_file(file);
  if (!text)
    return text.error();
  model_version v;
  try {
    const auto j = nlohmann::json::parse(text.value());
    v.name = j.at("name").get<std::string>();
    v.version = j.at("version").get<std::string>();
    v.source = j.at("source").get<std::string>();
    v.published_unix_ms = j.at("published_unix_ms").get<int64_t>();
    for (const auto& f : j.at("files"))
      v.files.push_back({f.at("path").get<std::string>(),
                         f.at("bytes").get<int64_t>(),
                         f.at("sha256").get<std::string>()});
  } catch (const std::exception& e) {
    return status::error(file.string() + ": not a version record ("
                         + e.what() + ")");
  }
  v.model_dir = version_dir / "model";
  return v;
}

// The first difference between what was recorded and what is there, or "".
std::string first_difference(const std::vector<published_file>& recorded,
                             const std::vector<published_file>& found) {
  std::map<std::string, const published_file*> there;
  for (const auto& f : found)
    there[f.path] = &f;
  for (const auto& r : recorded) {
    auto it = there.find(r.path);
    if (it == there.end())
      return r.path + " is missing";
    if (it->second->bytes != r.bytes || it->second->sha256 != r.sha256)
      return r.path + " differs (sha256 " + it->second->sha256.substr(0, 12)
             + "..., recorded " + r.sha256.substr(0, 12) + "...)";
    there.erase(it);
  }
  if (!there.empty())
    return there.begin()->first + " was not published";
  return "";
}

status copy_tree(const fs::path& from, const fs::path& to,
                 const std::vector<published_file>& files) {
  for (const auto& f : files) {
    std::error_code ec;
    const auto dst = to / f.path;
    TUTTI_RETURN_IF_ERROR(store::create_directories_durable(dst.parent_path()));
    fs::copy_file(from / f.path, dst, ec);
    if (ec)
      return status::error(dst.string() + ": " + ec.message());
    // Published bytes are read-only on disk as well as in the record.
    fs::permissions(dst, fs::perms::owner_read | fs::perms::group_read
                           | fs::perms::others_read,
                    ec);
  }
  return {};
}

} // namespace

expected<model_version> publish_model(const fs::path& registry,
                                      const fs::path& source,
                                      const std::string& name,
                                      const std::string& version) {
  TUTTI_RETURN_IF_ERROR(check_version_part("--name", name));
  TUTTI_RETURN_IF_ERROR(check_version_part("--version", version));
  // Only what loads is published: shapes and tensors are checked here,
  // not at the first service start.
  auto loaded = load_model(source);
  if (!loaded)
    return loaded.error();
  auto files = hash_tree(source);
  if (!files)
    return files.error();
  const auto version_dir = registry / name / version;
  const auto ref = name + "@" + version;
  std::error_code ec;
  if (fs::exists(version_dir / record_file, ec)) {
    auto existing = read_record(version_dir);
    if (!existing)
      return existing.error();
    const auto diff = first_difference(existing.value().files, files.value());
    if (!diff.empty())
      return status::error(ref + " is already published from other bytes ("
                           + diff
                           + "); versions are immutable, publish a new one");
    existing.value().existed = true;
    return existing;
  }
  model_version v;
  v.name = name;
  v.version = version;
  v.source = fs::absolute(source).lexically_normal().string();
  v.published_unix_ms =
    std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch())
      .count();
  v.files = files.value();
  // Staged beside its final place and renamed in whole: a reader sees no
  // version or a complete one.
  const auto staging = registry / name
                       / (".staging-" + version + "-"
                          + std::to_string(::getpid()));
  fs::remove_all(staging, ec);
  TUTTI_RETURN_IF_ERROR(store::create_directories_durable(staging / "model"));
  auto cleanup = [&] { fs::remove_all(staging, ec); };
  if (auto s = copy_tree(source, staging / "model", v.files); !s.ok()) {
    cleanup();
    return s;
  }
  auto copied = hash_tree(staging / "model");
  if (!copied || !first_difference(v.files, copied.value()).empty()) {
    cleanup();
    return status::error(ref + ": the copy in " + staging.string()
                         + " does not match the source ("
                         + (copied ? first_difference(v.files, copied.value())
                                   : copied.message())
                         + ")");
  }
  if (auto s = store::write_file_atomic(staging / record_file,
                                        to_json(v).dump(2) + "\n");
      !s.ok()) {
    cleanup();
    return s;
  }
  fs::rename(staging, version_dir, ec);
  if (ec) {
    cleanup();
    return status::error(version_dir.string() + ": " + ec.message()
                         + " (published at the same time by another?)");
  }
  TUTTI_RETURN_IF_ERROR(store::fsync_directory(registry / name));
  v.model_dir = version_dir / "model";
  return v;
}

expected<model_version> verify_model_version(const fs::path& registry,
                                             const std::string& name,
                                             const std::string& version) {
  const auto ref = name + "@" + version;
  const auto version_dir = registry / name / version;
  std::error_code ec;
  if (!fs::exists(version_dir / record_file, ec))
    return status::error(ref + ": not published in " + registry.string());
  auto v = read_record(version_dir);
  if (!v)
    return v.error();
  auto found = hash_tree(v.value().model_dir);
  if (!found)
    return found.error();
  const auto diff = first_difference(v.value().files, found.value());
  if (!diff.empty())
    return status::error(ref + ": " + (v.value().model_dir / diff).string()
                         + "; the registered version is corrupt, publish it "
                           "again under a new version");
  return v;
}

expected<std::vector<model_version>> list_model_versions(
  const fs::path& registry) {
  std::vector<model_version> out;
  std::error_code ec;
  if (!fs::is_directory(registry, ec))
    return status::error(registry.string() + ": not a directory");
  for (const auto& n : fs::directory_iterator(registry, ec)) {
    if (!n.is_directory() || n.path().filename().string()[0] == '.')
      continue;
    for (const auto& v : fs::directory_iterator(n.path(), ec)) {
      if (!fs::exists(v.path() / record_file))
        continue;
      auto r = read_record(v.path());
      if (!r)
        return r.error();
      out.push_back(std::move(r.value()));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.name, a.version) < std::tie(b.name, b.version);
  });
  return out;
}

expected<std::string> served_model_dir(serve_config& cfg) {
  if (cfg.model_version.empty())
    return cfg.model;
  std::string name, version;
  TUTTI_RETURN_IF_ERROR(parse_version_ref(cfg.model_version, name, version));
  auto v = verify_model_version(cfg.registry, name, version);
  if (!v)
    return v.error();
  if (cfg.model_name.empty())
    cfg.model_name = name;
  return v.value().model_dir.string();
}

} // namespace tutti::serve
