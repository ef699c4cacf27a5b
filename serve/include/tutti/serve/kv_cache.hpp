#pragma once
// The paged KV cache: a pool of fixed-size blocks, each holding the keys and
// values of `block_tokens` consecutive positions of one sequence for every
// layer, handed out from a free list. A sequence owns a block table (block
// ids in position order); position p lives in block table[p / block_tokens]
// at offset p % block_tokens. Not thread-safe: the scheduler's thread owns
// it.

#include <cstdint>
#include <vector>

namespace tutti::serve {

struct kv_geometry {
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_tokens = 16;

  // Bytes of one block: keys and values, every layer, fp32.
  int64_t block_bytes() const {
    return 2 * layers * block_tokens * kv_heads * head_dim * 4;
  }
};

class kv_cache {
public:
  kv_cache(const kv_geometry& g, int64_t blocks);

  // How many blocks fit in `bytes`.
  static int64_t blocks_for_budget(const kv_geometry& g, int64_t bytes);

  // Blocks needed to hold `tokens` positions.
  int64_t blocks_for_tokens(int64_t tokens) const {
    return (tokens + geometry_.block_tokens - 1) / geometry_.block_tokens;
  }

  // Grows `table` so it covers `tokens` positions. All or nothing: false
  // (and `table` unchanged) when the free list is too short.
  bool reserve(std::vector<int32_t>& table, int64_t tokens);

  // Returns every block of `table` to the free list and clears it.
  void release(std::vector<int32_t>& table);

  // Key / value row ([kv_heads, head_dim]) of position `offset` in `block`.
  float* key(int32_t block, int64_t layer, int64_t offset) {
    return row(block, layer, 0, offset);
  }
  float* value(int32_t block, int64_t layer, int64_t offset) {
    return row(block, layer, 1, offset);
  }

  const kv_geometry& geometry() const { return geometry_; }
  int64_t total_blocks() const { return total_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return total_ - free_blocks(); }

private:
  float* row(int32_t block, int64_t layer, int64_t which, int64_t offset) {
    const int64_t row_size = geometry_.kv_heads * geometry_.head_dim;
    return storage_.data()
           + ((((static_cast<int64_t>(block) * geometry_.layers + layer) * 2
                + which)
                 * geometry_.block_tokens
               + offset)
              * row_size);
  }

  kv_geometry geometry_;
  int64_t total_;
  std::vector<float> storage_;
  std::vector<int32_t> free_; // a stack: the most recently freed first
};

} // namespace tutti::serve
