#include "tutti/data/batch_sampler.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include "rng.hpp"

namespace tutti::data {

// A stream is the set of windows one sampler draws from: all windows
// (world == 0) or those of rank `rank`'s shards in shard-per-rank mode.
namespace {
struct stream_id {
  std::uint32_t rank = 0;
  std::uint32_t world = 0;
  bool global() const { return world == 0; }
  std::uint64_t key() const { return (std::uint64_t{world} << 32) | rank; }
};
} // namespace

struct batch_sampler::state {
  token_shards shards;
  std::vector<std::uint64_t>
    first_window; // prefix sums: shard i owns [first[i], first[i+1])

  struct epoch_order {
    std::uint64_t seed, epoch;
    std::vector<std::uint64_t> windows;
  };
  std::mutex mutex;
  // Per stream, the last two epochs' orders: a step crossing an epoch
  // boundary needs both, and ranks move through epochs together.
  std::map<std::uint64_t, std::deque<epoch_order>> cache;

  std::vector<std::uint64_t> members(stream_id s) const {
    std::vector<std::uint64_t> out;
    for (std::uint32_t i = 0; i < shards.size(); ++i)
      if (s.global() || i % s.world == s.rank)
        for (std::uint64_t w = first_window[i]; w < first_window[i + 1]; ++w)
          out.push_back(w);
    return out;
  }

  std::uint64_t member_count(stream_id s) const {
    std::uint64_t n = 0;
    for (std::uint32_t i = 0; i < shards.size(); ++i)
      if (s.global() || i % s.world == s.rank)
        n += first_window[i + 1] - first_window[i];
    return n;
  }

  // Caller holds `mutex`.
  const std::vector<std::uint64_t>& order(stream_id s, std::uint64_t seed,
                                          std::uint64_t epoch) {
    auto& entries = cache[s.key()];
    for (const auto& e : entries)
      if (e.seed == seed && e.epoch == epoch)
        return e.windows;
    std::vector<std::uint64_t> w = members(s);
    std::mt19937_64 rng(s.global()
                          ? detail::derive_seed(seed, {epoch})
                          : detail::derive_seed(seed, {s.rank, epoch}));
    for (std::uint64_t i = w.size(); i > 1; --i)
      std::swap(w[i - 1], w[detail::uniform_below(rng, i)]);
    entries.push_back({seed, epoch, std::move(w)});
    if (entries.size() > 2)
      entries.pop_front();
    return entries.back().windows;
  }
};

expected<batch_sampler> batch_sampler::create(token_shards train_shards,
                                              std::uint32_t seq_len) {
  if (seq_len == 0)
    return status::error("batch_sampler: seq_len must be > 0");
  batch_sampler s;
  s.seq_len_ = seq_len;
  s.state_ = std::make_shared<state>();
  s.state_->first_window.push_back(0);
  for (const auto& shard : train_shards)
    s.state_->first_window.push_back(s.state_->first_window.back()
                                     + shard.size()
                                         / (std::uint64_t{seq_len} + 1));
  if (s.state_->first_window.back() == 0)
    return status::error(
      "batch_sampler: no shard holds a window of seq_len + 1 = "
      + std::to_string(std::uint64_t{seq_len} + 1) + " tokens");
  s.state_->shards = std::move(train_shards);
  return s;
}

std::uint64_t batch_sampler::window_count() const {
  return state_->first_window.back();
}

std::uint32_t batch_sampler::shard_count() const {
  return static_cast<std::uint32_t>(state_->shards.size());
}

window_location batch_sampler::locate(std::uint64_t window) const {
  const auto& first = state_->first_window;
  // The last shard whose first window is <= window (skipping empty shards).
  const auto it = std::upper_bound(first.begin(), first.end(), window) - 1;
  const auto shard = static_cast<std::uint32_t>(it - first.begin());
  return {shard, (window - *it) * (std::uint64_t{seq_len_} + 1)};
}

std::vector<std::uint64_t> batch_sampler::positions(std::uint32_t rank,
                                                    std::uint32_t world,
                                                    std::uint64_t seed,
                                                    std::uint64_t first,
                                                    std::uint64_t count) const {
  const stream_id s{rank, world};
  const std::uint64_t n = state_->member_count(s);
  std::vector<std::uint64_t> out;
  out.reserve(count);
  std::lock_guard lock(state_->mutex);
  for (std::uint64_t p = first; p < first + count;) {
    const std::uint64_t epoch = p / n;
    const auto& order = state_->order(s, seed, epoch);
    // Copy the run of positions that falls in this epoch.
    const std::uint64_t end = std::min(first + count, (epoch + 1) * n);
    for (; p < end; ++p)
      out.push_back(order[p % n]);
  }
  return out;
}

std::vector<std::uint64_t> batch_sampler::global_batch(
  std::uint64_t seed, std::uint64_t step,
  std::uint64_t global_batch_size) const {
  return positions(0, 0, seed, step * global_batch_size, global_batch_size);
}

std::uint64_t batch_sampler::epoch_of(std::uint64_t step,
                                      std::uint64_t global_batch_size) const {
  return step * global_batch_size / window_count();
}

status batch_sampler::check_rank(std::uint64_t global_batch_size,
                                 std::uint32_t rank,
                                 std::uint32_t world) const {
  if (world == 0 || rank >= world)
    return status::error("batch_sampler: rank " + std::to_string(rank)
                         + " is outside world size " + std::to_string(world));
  if (global_batch_size % world != 0)
    return status::error(
      "batch_sampler: global batch " + std::to_string(global_batch_size)
      + " is not divisible by world size " + std::to_string(world));
  return {};
}

expected<std::vector<std::uint64_t>> batch_sampler::own_shard_batch(
  std::uint64_t seed, std::uint64_t step, std::uint64_t global_batch_size,
  std::uint32_t rank, std::uint32_t world) const {
  auto epoch = own_shard_epoch_of(step, global_batch_size, rank,
                                  world); // validates
  if (!epoch.ok())
    return epoch.error();
  const std::uint64_t per_rank = global_batch_size / world;
  return positions(rank, world, seed, step * per_rank, per_rank);
}

expected<std::uint64_t> batch_sampler::own_shard_epoch_of(
  std::uint64_t step, std::uint64_t global_batch_size, std::uint32_t rank,
  std::uint32_t world) const {
  TUTTI_RETURN_IF_ERROR(check_rank(global_batch_size, rank, world));
  const std::uint64_t n = state_->member_count({rank, world});
  if (n == 0)
    return status::error(
      "batch_sampler: shard-per-rank: rank " + std::to_string(rank) + " of "
      + std::to_string(world) + " owns no window ("
      + std::to_string(shard_count())
      + " train shards; need at least one non-empty shard per rank)");
  return step * (global_batch_size / world) / n;
}

expected<std::vector<std::uint64_t>> batch_sampler::rank_batch(
  std::uint64_t seed, std::uint64_t step, std::uint64_t global_batch_size,
  std::uint32_t rank, std::uint32_t world, bool shard_per_rank) const {
  if (shard_per_rank)
    return own_shard_batch(seed, step, global_batch_size, rank, world);
  if (auto err = check_rank(global_batch_size, rank, world); !err)
    return err;
  return rank_slice(global_batch(seed, step, global_batch_size), rank, world);
}

batch batch_sampler::materialize(std::span<const std::uint64_t> windows) const {
  batch b;
  b.rows = windows.size();
  b.seq_len = seq_len_;
  b.inputs.reserve(windows.size() * seq_len_);
  b.targets.reserve(windows.size() * seq_len_);
  for (std::uint64_t w : windows) {
    const window_location at = locate(w);
    const auto tokens = state_->shards[at.shard].begin()
                        + static_cast<std::ptrdiff_t>(at.offset);
    b.inputs.insert(b.inputs.end(), tokens, tokens + seq_len_);
    b.targets.insert(b.targets.end(), tokens + 1, tokens + seq_len_ + 1);
  }
  return b;
}

expected<std::vector<std::uint64_t>> rank_slice(
  std::span<const std::uint64_t> global_ids, std::uint32_t rank,
  std::uint32_t world) {
  using ids = std::vector<std::uint64_t>;
  if (world == 0 || rank >= world)
    return status::error("rank_slice: rank " + std::to_string(rank)
                         + " is outside world size " + std::to_string(world));
  if (global_ids.size() % world != 0)
    return status::error(
      "rank_slice: global batch " + std::to_string(global_ids.size())
      + " is not divisible by world size " + std::to_string(world));
  const std::size_t per_rank = global_ids.size() / world;
  const auto begin = global_ids.begin()
                     + static_cast<std::ptrdiff_t>(rank * per_rank);
  return ids(begin, begin + static_cast<std::ptrdiff_t>(per_rank));
}

batch eval_windows(const token_shards& val_shards, std::uint32_t seq_len,
                   std::uint64_t max_windows) {
  batch b;
  b.seq_len = seq_len;
  if (seq_len == 0)
    return b;
  const std::uint64_t span = std::uint64_t{seq_len} + 1;
  for (const auto& shard : val_shards)
    for (std::uint64_t at = 0;
         at + span <= shard.size() && b.rows < max_windows;
         at += span, ++b.rows) {
      b.inputs.insert(b.inputs.end(), shard.begin() + at,
                      shard.begin() + at + seq_len);
      b.targets.insert(b.targets.end(), shard.begin() + at + 1,
                       shard.begin() + at + span);
    }
  return b;
}

} // namespace tutti::data
