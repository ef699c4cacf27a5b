#pragma once
// Producing dataset directories (layout in dataset.hpp).

#include <cstdint>
#include <filesystem>
#include <vector>

#include "tutti/data/dataset.hpp"
#include "tutti/base/status.hpp"

namespace tutti::data {

// Synthetic data from markov_source::random(vocab, seed): `tokens` in total,
// of which round(tokens * val_fraction) go to val-00000.tok and the rest,
// one continuous stream, is cut into `shards` train shards of near-equal
// size. The val stream is generated separately (its own derived seed), so it
// is held out rather than a continuation of the train text. Only order 2 is
// supported. meta.json records the exact entropy rate.
status synth_dataset(const std::filesystem::path& out_dir, std::uint32_t vocab,
                     std::uint32_t order, std::uint64_t seed,
                     std::uint64_t tokens, double val_fraction = 0.1,
                     std::uint32_t shards = 2);

// Topic data from topic_source::random(vocab, topics, switch_prob, seed),
// split like synth_dataset. meta.json: source "topics", order 2, the exact
// entropy rate, and the topic count and switch probability.
status synth_topic_dataset(const std::filesystem::path& out_dir,
                           std::uint32_t vocab, std::uint32_t topics,
                           double switch_prob, std::uint64_t seed,
                           std::uint64_t tokens, double val_fraction = 0.1,
                           std::uint32_t shards = 2);

} // namespace tutti::data
