#include "tutti/data/dataset.hpp"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "mapped_file.hpp"
#include "tutti/data/shard_format.hpp"
#include "tutti/store/atomic_file.hpp"

namespace tutti::data {

std::filesystem::path shard_path(const std::filesystem::path& dir,
                                 std::string_view split, std::uint32_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "-%05u.tok", index);
  return dir / (std::string(split) + name);
}

std::string meta_to_json(const dataset_meta& m) {
  // Ordered: the file reads in the order a person looks for things. Doubles
  // print in their shortest exact form, so the entropy rate reads back
  // bit for bit.
  nlohmann::ordered_json j;
  j["vocab_size"] = m.vocab_size;
  j["order"] = m.order;
  j["seed"] = m.seed;
  j["tokens"] = m.tokens;
  j["train_tokens"] = m.train_tokens;
  j["val_tokens"] = m.val_tokens;
  j["entropy_rate_nats"] = m.entropy_rate_nats
                             ? nlohmann::ordered_json(*m.entropy_rate_nats)
                             : nullptr;
  j["train_shards"] = m.train_shards;
  j["val_shards"] = m.val_shards;
  j["source"] = m.source;
  if (m.topics > 0) {
    j["topics"] = m.topics;
    j["topic_switch_prob"] = m.topic_switch_prob;
  }
  return j.dump(2) + "\n";
}

status write_meta(const std::filesystem::path& dir, const dataset_meta& meta) {
  return store::write_file_atomic(dir / "meta.json", meta_to_json(meta));
}

expected<dataset_meta> read_meta(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "meta.json";
  auto text = store::read_file(path);
  if (!text.ok())
    return text.error();
  const auto n = nlohmann::json::parse(text.value(), nullptr,
                                       /*allow_exceptions=*/false);
  if (n.is_discarded())
    return status::error(path.string() + ": not valid JSON");
  if (!n.is_object())
    return status::error(path.string() + ": not a JSON object");
  for (const char* key :
       {"vocab_size", "order", "seed", "tokens", "train_tokens", "val_tokens",
        "entropy_rate_nats", "train_shards", "val_shards", "source"})
    if (!n.contains(key))
      return status::error(path.string() + ": missing key \"" + key + "\"");
  const char* at = "";
  try {
    dataset_meta m;
    at = "vocab_size";
    m.vocab_size = n[at].get<std::uint32_t>();
    at = "order";
    m.order = n[at].get<std::uint32_t>();
    at = "seed";
    m.seed = n[at].get<std::uint64_t>();
    at = "tokens";
    m.tokens = n[at].get<std::uint64_t>();
    at = "train_tokens";
    m.train_tokens = n[at].get<std::uint64_t>();
    at = "val_tokens";
    m.val_tokens = n[at].get<std::uint64_t>();
    at = "entropy_rate_nats";
    if (!n[at].is_null()) {
      if (!n[at].is_number())
        return status::error(path.string()
                             + ": entropy_rate_nats is not a number: "
                             + n[at].dump());
      m.entropy_rate_nats = n[at].get<double>();
    }
    at = "train_shards";
    m.train_shards = n[at].get<std::uint32_t>();
    at = "val_shards";
    m.val_shards = n[at].get<std::uint32_t>();
    at = "source";
    m.source = n[at].get<std::string>();
    if (n.contains("topics")) {
      at = "topics";
      m.topics = n[at].get<std::uint32_t>();
      at = "topic_switch_prob";
      m.topic_switch_prob = n.value(at, 0.0);
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    return status::error(path.string() + ": " + at + ": " + e.what());
  }
}

expected<std::vector<std::vector<std::int32_t>>> load_split(
  const std::filesystem::path& dir, std::string_view split) {
  using shards = std::vector<std::vector<std::int32_t>>;
  if (split != "train" && split != "val")
    return status::error(
      "load_split: split must be \"train\" or \"val\", got \""
      + std::string(split) + "\"");
  auto meta = read_meta(dir);
  if (!meta.ok())
    return meta.error();
  const std::uint32_t count = split == "train" ? meta.value().train_shards
                                               : meta.value().val_shards;
  shards out;
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto path = shard_path(dir, split, i);
    // The next shard comes into the page cache while this one is verified.
    if (i + 1 < count)
      (void)read_ahead(shard_path(dir, split, i + 1));
    auto s = read_shard(path);
    if (!s.ok())
      return s.error();
    if (s.value().vocab_size != meta.value().vocab_size)
      return status::error(path.string() + ": vocab_size "
                           + std::to_string(s.value().vocab_size)
                           + " differs from meta.json's "
                           + std::to_string(meta.value().vocab_size));
    out.push_back(std::move(s.value().tokens));
  }
  return out;
}

expected<warm_report> warm(const std::filesystem::path& dir) {
  auto meta = read_meta(dir);
  if (!meta.ok())
    return meta.error();
  warm_report r;
  for (const auto& [split, count] :
       {std::pair{"train", meta.value().train_shards},
        std::pair{"val", meta.value().val_shards}})
    for (std::uint32_t i = 0; i < count; ++i) {
      auto bytes = read_ahead(shard_path(dir, split, i));
      if (!bytes.ok())
        return bytes.error();
      r.bytes += bytes.value();
      ++r.files;
    }
  return r;
}

} // namespace tutti::data
