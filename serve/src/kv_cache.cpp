#include "tutti/serve/kv_cache.hpp"

#include <algorithm>
#include <cstddef>

namespace tutti::serve {

kv_cache::kv_cache(const kv_geometry& g, int64_t blocks, bool storage)
  : geometry_(g), total_(blocks),
    storage_(storage ? static_cast<size_t>(blocks * g.block_bytes() / 4) : 0),
    holders_(blocks, 0), hash_of_(blocks, 0), lru_at_(blocks, lru_.end()) {
  free_.reserve(blocks);
  for (int64_t b = blocks - 1; b >= 0; --b)
    free_.push_back(static_cast<int32_t>(b));
}

int64_t kv_cache::blocks_for_budget(const kv_geometry& g, int64_t bytes) {
  return g.block_bytes() > 0 ? bytes / g.block_bytes() : 0;
}

void kv_cache::forget(int32_t block) {
  if (hash_of_[block] != 0)
    cached_.erase(hash_of_[block]);
  hash_of_[block] = 0;
}

int32_t kv_cache::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = lru_.front();
    lru_.pop_front();
    lru_at_[b] = lru_.end();
    forget(b);
  }
  holders_[b] = 1;
  return b;
}

bool kv_cache::reserve(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t want = blocks_for_tokens(tokens);
  const int64_t more = want - static_cast<int64_t>(table.size());
  if (more <= 0)
    return true;
  if (more > free_blocks())
    return false;
  for (int64_t i = 0; i < more; ++i)
    table.push_back(take_block());
  return true;
}

void kv_cache::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int32_t b = *it;
    if (--holders_[b] > 0)
      continue;
    if (hash_of_[b] != 0)
      lru_at_[b] = lru_.insert(lru_.end(), b);
    else
      free_.push_back(b);
  }
  table.clear();
}

uint64_t kv_cache::chain_hash(uint64_t parent, const int32_t* tokens,
                              int64_t n) {
  // splitmix64 over the parent and each token: any change moves every bit.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(parent + 0x9e3779b97f4a7c15ull);
  for (int64_t i = 0; i < n; ++i)
    h = mix(h
            ^ (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i]))
               + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1)));
  return h == 0 ? 1 : h; // 0 means "not registered"
}

int64_t kv_cache::match_prefix(const int32_t* tokens, int64_t n,
                               std::vector<int32_t>* table, uint64_t* hash) {
  const int64_t bt = geometry_.block_tokens;
  uint64_t h = 0;
  int64_t matched = 0;
  for (; (matched + 1) * bt <= n - 1; ++matched) {
    const int32_t* block_tokens = tokens + matched * bt;
    const uint64_t next = chain_hash(h, block_tokens, bt);
    auto it = cached_.find(next);
    // The hash finds it; the parent and the tokens confirm it.
    if (it == cached_.end() || it->second.parent != h
        || !std::equal(block_tokens, block_tokens + bt,
                       it->second.tokens.begin()))
      break;
    if (table) {
      const int32_t b = it->second.block;
      if (holders_[b]++ == 0) {
        lru_.erase(lru_at_[b]);
        lru_at_[b] = lru_.end();
      }
      table->push_back(b);
    }
    h = next;
  }
  if (hash)
    *hash = h;
  return matched;
}

uint64_t kv_cache::register_block(int32_t block, uint64_t parent,
                                  const int32_t* tokens) {
  const int64_t bt = geometry_.block_tokens;
  const uint64_t h = chain_hash(parent, tokens, bt);
  if (hash_of_[block] == 0 && cached_.find(h) == cached_.end()) {
    cached_[h] = {parent, std::vector<int32_t>(tokens, tokens + bt), block};
    hash_of_[block] = h;
  }
  return h;
}

} // namespace tutti::serve
