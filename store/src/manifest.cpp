// MANIFEST (JSON) and whole-checkpoint verification.
#include <set>

#include "file_io.hpp"
#include "json.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/checksum.hpp"

namespace tutti::store {
namespace {

constexpr const char* manifest_format = "tutti-checkpoint-manifest";
constexpr std::int64_t manifest_version = 1;

// The canonical text of a manifest. The "checksum" field is the xxh64 of this
// text without it; a reader re-encodes what it parsed and compares, so any
// changed value is caught while whitespace edits are not an error.
std::string encode(const manifest& m, bool with_checksum) {
  std::string s = "{\n";
  s += "  \"format\": " + detail::json::quote(manifest_format) + ",\n";
  s += "  \"version\": " + std::to_string(manifest_version) + ",\n";
  s += "  \"step\": " + std::to_string(m.step) + ",\n";
  s += "  \"epoch\": " + std::to_string(m.epoch) + ",\n";
  s += "  \"world_size\": " + std::to_string(m.world_size) + ",\n";
  s += "  \"shards\": [";
  for (std::size_t i = 0; i < m.shards.size(); ++i) {
    const auto& e = m.shards[i];
    s += std::string(i ? "," : "")
         + "\n    {\"file\": " + detail::json::quote(e.file)
         + ", \"bytes\": " + std::to_string(e.bytes) + ", \"xxh64\": \""
         + detail::hex64(e.xxh64) + "\"}";
  }
  s += m.shards.empty() ? "]" : "\n  ]";
  if (with_checksum) {
    std::string body = encode(m, false);
    s += ",\n  \"checksum\": \""
         + detail::hex64(xxh64(body.data(), body.size())) + "\"";
  }
  return s + "\n}\n";
}

// A shard must be a plain file inside the checkpoint directory: a MANIFEST
// must not be able to point verification (or deletion) elsewhere.
bool plain_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f != "MANIFEST"
         && f.find('/') == std::string::npos
         && f.find('\0') == std::string::npos;
}

bool hex_field(const detail::json::value* v, std::uint64_t& out) {
  return v != nullptr && v->type == detail::json::value::kind::string
         && detail::parse_hex64(v->text, out);
}

} // namespace

status write_manifest(const std::filesystem::path& ckpt_dir,
                      const manifest& m) {
  for (const auto& e : m.shards)
    if (!plain_file_name(e.file))
      return status::error((ckpt_dir / "MANIFEST").string() + ": shard name '"
                           + e.file + "' is not a plain file name");
  if (auto err = write_file_atomic(ckpt_dir / "MANIFEST", encode(m, true));
      !err)
    return err;
  // The MANIFEST is the last file of a checkpoint: also make the checkpoint
  // directory's own entry durable, however it was created, before the caller
  // commits it to the job store.
  std::filesystem::path dir =
    std::filesystem::absolute(ckpt_dir).lexically_normal();
  if (!dir.has_filename())
    dir = dir.parent_path(); // "step-1/" names step-1
  return fsync_directory(dir.parent_path());
}

expected<manifest> read_manifest(const std::filesystem::path& ckpt_dir) {
  const auto path = ckpt_dir / "MANIFEST";
  auto fail = [&](const std::string& what) {
    return status::error(path.string() + ": " + what);
  };
  auto text = read_file(path);
  if (!text.ok())
    return text.error();
  if (text.value().empty())
    return fail("empty file (truncated MANIFEST)");
  auto doc = detail::json::parse(text.value());
  if (!doc.ok())
    return fail("not valid JSON (truncated or corrupt MANIFEST): "
                + doc.message());
  const auto& v = doc.value();
  manifest m;
  std::int64_t version = 0;
  const auto* format = v.find("format");
  const auto* shards = v.find("shards");
  const auto* checksum = v.find("checksum");
  if (format == nullptr || format->type != detail::json::value::kind::string
      || format->text != manifest_format)
    return fail(
      "not a tutti checkpoint manifest (\"format\" missing or wrong)");
  if (v.find("version") == nullptr || !v.find("version")->as_int64(version)
      || version != manifest_version)
    return fail("unsupported or missing \"version\" (this build reads "
                + std::to_string(manifest_version) + ")");
  auto int_field = [&](const char* k, std::int64_t& out) {
    return v.find(k) && v.find(k)->as_int64(out);
  };
  if (!int_field("step", m.step) || !int_field("epoch", m.epoch)
      || !int_field("world_size", m.world_size))
    return fail("missing or non-integer step/epoch/world_size");
  if (m.step < 0 || m.world_size < 0)
    return fail("negative step or world_size");
  if (shards == nullptr || shards->type != detail::json::value::kind::array)
    return fail("missing \"shards\" array");
  for (std::size_t i = 0; i < shards->items.size(); ++i) {
    const auto& s = shards->items[i];
    const auto* file = s.find("file");
    const auto* bytes = s.find("bytes");
    const auto* hash = s.find("xxh64");
    manifest_entry e;
    if (file == nullptr || file->type != detail::json::value::kind::string
        || bytes == nullptr || !bytes->as_uint64(e.bytes)
        || !hex_field(hash, e.xxh64))
      return fail(
        "shard #" + std::to_string(i)
        + ": needs \"file\", integer \"bytes\", 16-hex-digit \"xxh64\"");
    if (!plain_file_name(file->text))
      return fail("shard #" + std::to_string(i) + ": '" + file->text
                  + "' is not a plain file name");
    e.file = file->text;
    m.shards.push_back(std::move(e));
  }
  std::uint64_t stored = 0;
  if (!hex_field(checksum, stored))
    return fail("missing or malformed \"checksum\"");
  std::string body = encode(m, false);
  std::uint64_t computed = xxh64(body.data(), body.size());
  if (stored != computed)
    return fail("checksum mismatch (stored " + detail::hex64(stored)
                + ", computed " + detail::hex64(computed)
                + "): the MANIFEST was modified or damaged");
  return m;
}

expected<manifest_entry> describe_shard(const std::filesystem::path& file) {
  auto in = detail::input_file::open(file);
  if (!in.ok())
    return in.error();
  auto h = in.value().hash_range(0, in.value().size());
  if (!h.ok())
    return h.error();
  return manifest_entry{file.filename().string(), in.value().size(), h.value()};
}

status verify_checkpoint(const std::filesystem::path& ckpt_dir) {
  auto m = read_manifest(ckpt_dir);
  if (!m.ok())
    return status::error(m.message());
  const std::string manifest_path = (ckpt_dir / "MANIFEST").string();
  if (m.value().world_size < 1
      || m.value().shards.size()
           != static_cast<std::size_t>(m.value().world_size))
    return status::error(
      manifest_path + ": lists " + std::to_string(m.value().shards.size())
      + " shards for world_size " + std::to_string(m.value().world_size)
      + " (one per rank expected)");
  std::set<std::string> files;
  std::set<std::int64_t> ranks;
  for (const auto& e : m.value().shards) {
    if (!files.insert(e.file).second)
      return status::error(manifest_path + ": shard '" + e.file
                           + "' listed twice");
    const auto path = ckpt_dir / e.file;
    std::error_code ec;
    auto size = std::filesystem::file_size(path, ec);
    if (ec)
      return status::error(path.string()
                           + ": listed in MANIFEST but cannot be read: "
                           + ec.message());
    if (size != e.bytes)
      return status::error(path.string() + ": " + std::to_string(size)
                           + " bytes, MANIFEST says " + std::to_string(e.bytes)
                           + (size < e.bytes ? " (truncated)" : ""));
    // Structure and tensor hashes first: their errors name the tensor and
    // offset, more useful than "the whole-file hash differs".
    std::uint64_t whole = 0;
    auto shard = verify_shard_file(path, &whole);
    if (!shard.ok())
      return status::error(shard.message());
    if (whole != e.xxh64)
      return status::error(
        path.string() + ": whole-file xxh64 " + detail::hex64(whole)
        + ", MANIFEST says " + detail::hex64(e.xxh64)
        + " (file replaced or MANIFEST from another write?)");
    const auto& meta = shard.value().meta;
    if (meta.step != m.value().step || meta.epoch != m.value().epoch)
      return status::error(
        path.string() + ": shard is step " + std::to_string(meta.step)
        + " epoch " + std::to_string(meta.epoch) + ", MANIFEST says step "
        + std::to_string(m.value().step) + " epoch "
        + std::to_string(m.value().epoch));
    if (meta.rank < 0 || meta.rank >= m.value().world_size
        || !ranks.insert(meta.rank).second)
      return status::error(path.string() + ": rank " + std::to_string(meta.rank)
                           + " is out of range or duplicated for world_size "
                           + std::to_string(m.value().world_size));
  }
  return {};
}

} // namespace tutti::store
