#include "tutti/data/synth.hpp"

#include <cmath>
#include <system_error>

#include "rng.hpp"
#include "tutti/data/markov_source.hpp"
#include "tutti/data/shard_format.hpp"
#include "tutti/data/topic_source.hpp"
#include "tutti/store/atomic_file.hpp"

namespace tutti::data {
namespace {

status check_split_args(double val_fraction, std::uint32_t shards) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    return status::error("val_fraction must be in [0, 1), got "
                         + std::to_string(val_fraction));
  if (shards == 0)
    return status::error(std::string("shards must be >= 1"));
  return {};
}

status make_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return status::error("cannot create directory " + dir.string() + ": "
                         + ec.message());
  return {};
}

// Cuts `train` into `shards` near-equal pieces, writes them and val, and
// finally meta.json: its presence marks the directory complete.
status write_dataset(const std::filesystem::path& dir,
                     const std::vector<std::int32_t>& train,
                     const std::vector<std::int32_t>& val, std::uint32_t shards,
                     dataset_meta meta) {
  if (auto err = make_dir(dir); !err)
    return err;
  for (std::uint32_t i = 0; i < shards; ++i) {
    const auto begin = train.begin()
                       + static_cast<std::ptrdiff_t>(train.size() * i / shards);
    const auto end = train.begin()
                     + static_cast<std::ptrdiff_t>(train.size() * (i + 1)
                                                   / shards);
    if (auto err = write_shard(shard_path(dir, "train", i), {begin, end},
                               meta.vocab_size);
        !err)
      return err;
  }
  if (auto err = write_shard(shard_path(dir, "val", 0), val, meta.vocab_size);
      !err)
    return err;
  meta.train_tokens = train.size();
  meta.val_tokens = val.size();
  meta.tokens = train.size() + val.size();
  meta.train_shards = shards;
  meta.val_shards = 1;
  return write_meta(dir, meta);
}

} // namespace

status synth_dataset(const std::filesystem::path& out_dir, std::uint32_t vocab,
                     std::uint32_t order, std::uint64_t seed,
                     std::uint64_t tokens, double val_fraction,
                     std::uint32_t shards) {
  if (order != 2)
    return status::error("synth_dataset: only order 2 is supported, got order "
                         + std::to_string(order));
  if (auto err = check_split_args(val_fraction, shards); !err)
    return status::error("synth_dataset: " + err.message());
  auto source = markov_source::random(vocab, seed);
  if (!source.ok())
    return status::error("synth_dataset: " + source.message());

  const auto val_tokens = static_cast<std::uint64_t>(
    std::llround(double(tokens) * val_fraction));
  const std::vector<std::int32_t> train = source.value().generate(
    tokens - val_tokens,
    detail::derive_seed(seed, {0x747261696eULL})); // "train"
  const std::vector<std::int32_t> val = source.value().generate(
    val_tokens, detail::derive_seed(seed, {0x76616cULL})); // "val"

  dataset_meta meta;
  meta.vocab_size = vocab;
  meta.order = order;
  meta.seed = seed;
  meta.entropy_rate_nats = source.value().entropy_rate();
  meta.source = "markov2";
  return write_dataset(out_dir, train, val, shards, meta);
}

status synth_topic_dataset(const std::filesystem::path& out_dir,
                           std::uint32_t vocab, std::uint32_t topics,
                           double switch_prob, std::uint64_t seed,
                           std::uint64_t tokens, double val_fraction,
                           std::uint32_t shards) {
  if (auto err = check_split_args(val_fraction, shards); !err)
    return status::error("synth_topic_dataset: " + err.message());
  auto source = topic_source::random(vocab, topics, switch_prob, seed);
  if (!source.ok())
    return status::error("synth_topic_dataset: " + source.message());
  const auto val_tokens = static_cast<std::uint64_t>(
    std::llround(double(tokens) * val_fraction));
  const std::vector<std::int32_t> train = source.value().generate(
    tokens - val_tokens, detail::derive_seed(seed, {0x747261696eULL}));
  const std::vector<std::int32_t> val = source.value().generate(
    val_tokens, detail::derive_seed(seed, {0x76616cULL}));
  dataset_meta meta;
  meta.vocab_size = vocab;
  meta.order = 2;
  meta.seed = seed;
  meta.entropy_rate_nats = source.value().entropy_rate();
  meta.source = "topics";
  meta.topics = topics;
  meta.topic_switch_prob = switch_prob;
  return write_dataset(out_dir, train, val, shards, meta);
}

} // namespace tutti::data
