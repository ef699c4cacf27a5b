#include "tutti/serve/kv_cache.hpp"

#include <cstddef>

namespace tutti::serve {

kv_cache::kv_cache(const kv_geometry& g, int64_t blocks)
  : geometry_(g), total_(blocks),
    storage_(static_cast<size_t>(blocks * g.block_bytes() / 4)) {
  free_.reserve(blocks);
  for (int64_t b = blocks - 1; b >= 0; --b)
    free_.push_back(static_cast<int32_t>(b));
}

int64_t kv_cache::blocks_for_budget(const kv_geometry& g, int64_t bytes) {
  return g.block_bytes() > 0 ? bytes / g.block_bytes() : 0;
}

bool kv_cache::reserve(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t want = blocks_for_tokens(tokens);
  const int64_t more = want - static_cast<int64_t>(table.size());
  if (more <= 0)
    return true;
  if (more > free_blocks())
    return false;
  for (int64_t i = 0; i < more; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void kv_cache::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it)
    free_.push_back(*it);
  table.clear();
}

} // namespace tutti::serve
