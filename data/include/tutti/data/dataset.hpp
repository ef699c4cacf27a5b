#pragma once
// A dataset directory:
//   meta.json                    what the shards hold (written last: a
//                                directory without it is incomplete)
//   train-00000.tok ...          training shards (shard_format.hpp)
//   val-00000.tok ...            held-out shards
// meta.json keys: vocab_size, order, seed, tokens, train_tokens, val_tokens,
// entropy_rate_nats (number or null), train_shards, val_shards, source.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::data {

struct dataset_meta {
  std::uint32_t vocab_size = 0;
  std::uint32_t order = 0; // Markov order of the source; 0 for real text
  std::uint64_t seed = 0;
  std::uint64_t tokens = 0; // train_tokens + val_tokens
  std::uint64_t train_tokens = 0;
  std::uint64_t val_tokens = 0;
  // Exact entropy rate of a synthetic source: the loss floor. None for text.
  std::optional<double> entropy_rate_nats;
  std::uint32_t train_shards = 0;
  std::uint32_t val_shards = 0;
  std::string source; // "markov2" or "bytes"
  // Topic data (source "topics"): written only then, optional on reading.
  std::uint32_t topics = 0;
  double topic_switch_prob = 0;
};

// "train-00000.tok" for (dir, "train", 0).
std::filesystem::path shard_path(const std::filesystem::path& dir,
                                 std::string_view split, std::uint32_t index);

// JSON text of meta; doubles are printed so they read back bit-exact.
std::string meta_to_json(const dataset_meta& meta);
status write_meta(const std::filesystem::path& dir, const dataset_meta& meta);
expected<dataset_meta> read_meta(const std::filesystem::path& dir);

// All shards of `split` ("train" or "val") as listed by meta.json, each
// verified by read_shard and checked against meta's vocab_size; the next
// shard is read ahead while one is verified.
expected<std::vector<std::vector<std::int32_t>>> load_split(
  const std::filesystem::path& dir, std::string_view split);

// Cache warm-up: asks the kernel to bring every shard meta.json lists into
// its page cache in the background (posix_fadvise WILLNEED), so a job
// starting next reads them from memory. Returns what was asked for.
struct warm_report {
  std::uint32_t files = 0;
  std::uint64_t bytes = 0;
};
expected<warm_report> warm(const std::filesystem::path& dir);

} // namespace tutti::data
