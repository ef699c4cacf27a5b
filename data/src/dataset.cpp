#include "tutti/data/dataset.hpp"

#include <charconv>
#include <cstdio>

#include <yaml-cpp/yaml.h>

#include "tutti/data/shard_format.hpp"
#include "tutti/store/atomic_file.hpp"

namespace tutti::data {
namespace {


// Shortest text that parses back to the same double.
std::string exact_double(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, end);
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

} // namespace

std::filesystem::path shard_path(const std::filesystem::path& dir, std::string_view split, std::uint32_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "-%05u.tok", index);
  return dir / (std::string(split) + name);
}

std::string meta_to_json(const dataset_meta& m) {
  std::string j = "{\n";
  auto field = [&](std::string_view key, const std::string& value, bool last = false) {
    j += "  " + json_string(key) + ": " + value + (last ? "\n" : ",\n");
  };
  field("vocab_size", std::to_string(m.vocab_size));
  field("order", std::to_string(m.order));
  field("seed", std::to_string(m.seed));
  field("tokens", std::to_string(m.tokens));
  field("train_tokens", std::to_string(m.train_tokens));
  field("val_tokens", std::to_string(m.val_tokens));
  field("entropy_rate_nats", m.entropy_rate_nats ? exact_double(*m.entropy_rate_nats) : "null");
  field("train_shards", std::to_string(m.train_shards));
  field("val_shards", std::to_string(m.val_shards));
  field("source", json_string(m.source), true);
  return j + "}\n";
}

status write_meta(const std::filesystem::path& dir, const dataset_meta& meta) {
  return store::write_file_atomic(dir / "meta.json", meta_to_json(meta));
}

expected<dataset_meta> read_meta(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "meta.json";
  auto text = store::read_file(path);
  if (!text.ok()) return text.error();
  // JSON is YAML, so yaml-cpp reads it; it also gives typed conversions.
  try {
    const YAML::Node n = YAML::Load(text.value());
    if (!n.IsMap()) return status::error(path.string() + ": not a JSON object");
    for (const char* key : {"vocab_size", "order", "seed", "tokens", "train_tokens", "val_tokens",
                            "entropy_rate_nats", "train_shards", "val_shards", "source"})
      if (!n[key]) return status::error(path.string() + ": missing key \"" + key + "\"");
    dataset_meta m;
    m.vocab_size = n["vocab_size"].as<std::uint32_t>();
    m.order = n["order"].as<std::uint32_t>();
    m.seed = n["seed"].as<std::uint64_t>();
    m.tokens = n["tokens"].as<std::uint64_t>();
    m.train_tokens = n["train_tokens"].as<std::uint64_t>();
    m.val_tokens = n["val_tokens"].as<std::uint64_t>();
    if (!n["entropy_rate_nats"].IsNull()) {
      // Parse the text ourselves: from_chars is exact, stream parsing may not be.
      const std::string s = n["entropy_rate_nats"].Scalar();
      double x = 0.0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
      if (ec != std::errc() || end != s.data() + s.size())
        return status::error(path.string() + ": entropy_rate_nats is not a number: " + s);
      m.entropy_rate_nats = x;
    }
    m.train_shards = n["train_shards"].as<std::uint32_t>();
    m.val_shards = n["val_shards"].as<std::uint32_t>();
    m.source = n["source"].as<std::string>();
    return m;
  } catch (const YAML::Exception& e) {
    return status::error(path.string() + ": " + e.what());
  }
}

expected<std::vector<std::vector<std::int32_t>>> load_split(const std::filesystem::path& dir,
                                                                   std::string_view split) {
  using shards = std::vector<std::vector<std::int32_t>>;
  if (split != "train" && split != "val")
    return status::error("load_split: split must be \"train\" or \"val\", got \"" + std::string(split) + "\"");
  auto meta = read_meta(dir);
  if (!meta.ok()) return meta.error();
  const std::uint32_t count = split == "train" ? meta.value().train_shards : meta.value().val_shards;
  shards out;
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto path = shard_path(dir, split, i);
    auto s = read_shard(path);
    if (!s.ok()) return s.error();
    if (s.value().vocab_size != meta.value().vocab_size)
      return status::error(path.string() + ": vocab_size " + std::to_string(s.value().vocab_size) +
                             " differs from meta.json's " + std::to_string(meta.value().vocab_size));
    out.push_back(std::move(s.value().tokens));
  }
  return out;
}

} // namespace tutti::data
