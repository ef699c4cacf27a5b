#pragma once
// Which token windows each rank trains on at each step: a pure function of
// (seed, step), so a restarted loader needs only the step to resume, and
// every rank agrees on the global batch without talking to the others.
//
// Sample space: windows of seq_len + 1 tokens, non-overlapping; shard i is
// cut into floor(size / (seq_len + 1)) windows and window ids run shard by
// shard (shard 0's windows first). The window sequence is a concatenation
// of epochs, each a seeded Fisher-Yates permutation of all windows; step s
// takes positions [s * B, (s + 1) * B) of it, crossing epochs as needed.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::data {

using token_shards = std::vector<std::vector<std::int32_t>>;

// rows windows of seq_len tokens, row-major; targets[i] is the token after inputs[i].
struct batch {
  std::uint64_t rows = 0;
  std::uint32_t seq_len = 0;
  std::vector<std::int32_t> inputs;
  std::vector<std::int32_t> targets;
};

struct window_location {
  std::uint32_t shard = 0;
  std::uint64_t offset = 0; // first token of the window within the shard
};

// Copies are cheap and share the tokens and the permutation cache; all
// methods are safe to call from several threads.
class batch_sampler {
public:
  batch_sampler() = default; // empty; only create() makes a usable one
  // Fails if seq_len is 0 or no shard holds a whole window.
  static expected<batch_sampler> create(token_shards train_shards,
                                        std::uint32_t seq_len);

  std::uint32_t seq_len() const { return seq_len_; }
  std::uint64_t window_count() const;
  std::uint32_t shard_count() const;
  window_location locate(std::uint64_t window) const; // window < window_count()

  // Window ids of the global batch of `step` (global_batch_size > 0).
  std::vector<std::uint64_t> global_batch(
    std::uint64_t seed, std::uint64_t step,
    std::uint64_t global_batch_size) const;
  // The epoch the first window of `step` belongs to.
  std::uint64_t epoch_of(std::uint64_t step,
                         std::uint64_t global_batch_size) const;

  // Shard-per-rank mode (data shards mapped one-to-one to ranks): rank r
  // draws only from shards with index % world == r, global_batch_size / world
  // windows per step, from its own epochs seeded by (seed, rank, epoch).
  // Fails unless global_batch_size % world == 0 and the rank owns a window.
  expected<std::vector<std::uint64_t>> own_shard_batch(
    std::uint64_t seed, std::uint64_t step, std::uint64_t global_batch_size,
    std::uint32_t rank, std::uint32_t world) const;
  expected<std::uint64_t> own_shard_epoch_of(std::uint64_t step,
                                             std::uint64_t global_batch_size,
                                             std::uint32_t rank,
                                             std::uint32_t world) const;

  // What `rank` trains on at `step` in either mode: its rank_slice of the
  // global batch, or own_shard_batch when shard_per_rank.
  expected<std::vector<std::uint64_t>> rank_batch(
    std::uint64_t seed, std::uint64_t step, std::uint64_t global_batch_size,
    std::uint32_t rank, std::uint32_t world, bool shard_per_rank) const;

  // inputs/targets of the given windows, in order.
  batch materialize(std::span<const std::uint64_t> windows) const;

private:
  struct state;
  // Positions [first, first + count) of the epoch sequence of rank's own
  // shards, or of all windows when world == 0.
  std::vector<std::uint64_t> positions(std::uint32_t rank, std::uint32_t world,
                                       std::uint64_t seed, std::uint64_t first,
                                       std::uint64_t count) const;
  status check_rank(std::uint64_t global_batch_size, std::uint32_t rank,
                    std::uint32_t world) const;

  std::uint32_t seq_len_ = 0;
  std::shared_ptr<state> state_;
};

// Contiguous slice [rank * B / world, (rank + 1) * B / world) of a global
// batch; fails unless B % world == 0 and rank < world.
expected<std::vector<std::uint64_t>> rank_slice(
  std::span<const std::uint64_t> global_ids, std::uint32_t rank,
  std::uint32_t world);

// The first max_windows windows of the val shards, in order (same windowing
// as training), ready to evaluate. Fewer rows if the shards hold fewer.
batch eval_windows(const token_shards& val_shards, std::uint32_t seq_len,
                   std::uint64_t max_windows);

} // namespace tutti::data
