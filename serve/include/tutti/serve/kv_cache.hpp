#pragma once
// The paged KV cache: a pool of fixed-size blocks, each holding the keys and
// values of `block_tokens` consecutive positions of one sequence for every
// layer, handed out from a free list. A sequence owns a block table (block
// ids in position order); position p lives in block table[p / block_tokens]
// at offset p % block_tokens. Not thread-safe: the scheduler's thread owns
// it.
//
// Prefix caching: a full block can be registered under the hash of its
// tokens chained with the hash of every block before it in its sequence.
// A later sequence whose tokens start the same way takes those blocks
// instead of computing them (reference-counted, shared, never written
// again: a sequence only writes past its matched blocks). A registered
// block whose last user is gone stays cached, on an LRU list, and counts
// as free: it is evicted (oldest first) when the free list runs dry. The
// keys and values of a position depend only on the tokens up to it (every
// row is batch-invariant), so a shared block holds the very bits the
// sequence would have computed.

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "tutti/model/model_shape.hpp"

namespace tutti::serve {

struct kv_geometry {
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_tokens = 16;
  // Multi-head latent attention: a position's one row per layer, the
  // normed latent and the rotated key (kv_lora_rank + qk_rope_head_dim
  // values, for every head), in place of keys and values; 0 without.
  int64_t latent = 0;

  // Values a position holds in one layer: its keys and its values, or its
  // latent row.
  int64_t token_values() const {
    return latent > 0 ? latent : 2 * kv_heads * head_dim;
  }
  // Bytes of one position, every layer, fp32.
  int64_t token_bytes() const { return layers * token_values() * 4; }
  // Bytes of one block.
  int64_t block_bytes() const { return block_tokens * token_bytes(); }
};

// The cache a model needs: its keys and values per KV head, or with
// multi-head latent attention its latent rows.
inline kv_geometry geometry_of_shape(const model::model_shape& s,
                                     int64_t block_tokens) {
  kv_geometry g{s.layers, s.kv_heads, s.head_dim, block_tokens};
  if (s.mla())
    g.latent = s.kv_lora_rank + s.qk_rope_head_dim;
  return g;
}

class kv_cache {
public:
  // Without storage the cache only hands out and tracks blocks: node 0's
  // view of another daemon's cache (serve.data_parallel_attention), whose
  // keys and values live in that daemon.
  kv_cache(const kv_geometry& g, int64_t blocks, bool storage = true);

  // How many blocks fit in `bytes`.
  static int64_t blocks_for_budget(const kv_geometry& g, int64_t bytes);

  // Blocks needed to hold `tokens` positions.
  int64_t blocks_for_tokens(int64_t tokens) const {
    return (tokens + geometry_.block_tokens - 1) / geometry_.block_tokens;
  }

  // Grows `table` so it covers `tokens` positions. All or nothing: false
  // (and `table` unchanged) when the free list is too short.
  bool reserve(std::vector<int32_t>& table, int64_t tokens);

  // Drops `table`'s hold on each of its blocks and clears it; a block no
  // one holds goes back to the free list, or to the LRU list if cached.
  void release(std::vector<int32_t>& table);

  // The chained hash of a block of tokens after the blocks hashed `parent`
  // (0 for the first block).
  static uint64_t chain_hash(uint64_t parent, const int32_t* tokens,
                             int64_t block_tokens);
  // How many leading full blocks of tokens[0, n) are cached, leaving at
  // least one token uncached (its logits are still needed). With `table`
  // (empty), takes them: appends their ids, holds them; `hash` is then the
  // chain hash through the last of them.
  int64_t match_prefix(const int32_t* tokens, int64_t n,
                       std::vector<int32_t>* table = nullptr,
                       uint64_t* hash = nullptr);
  // Registers full block `block` (held) holding `tokens` after blocks
  // hashed `parent`; returns its hash. A block already registered, or
  // whose contents another block holds, stays as it is.
  uint64_t register_block(int32_t block, uint64_t parent,
                          const int32_t* tokens);
  int64_t cached_blocks() const { return static_cast<int64_t>(cached_.size()); }

  // Key / value row ([kv_heads, head_dim]) of position `offset` in `block`;
  // with a latent geometry, key() is the position's latent row and there
  // are no values.
  float* key(int32_t block, int64_t layer, int64_t offset) {
    return row(block, layer, 0, offset);
  }
  float* value(int32_t block, int64_t layer, int64_t offset) {
    return row(block, layer, 1, offset);
  }

  const kv_geometry& geometry() const { return geometry_; }
  int64_t total_blocks() const { return total_; }
  // Blocks a reservation may take: free ones and cached ones no one holds.
  int64_t free_blocks() const {
    return static_cast<int64_t>(free_.size() + lru_.size());
  }
  int64_t used_blocks() const { return total_ - free_blocks(); }

private:
  float* row(int32_t block, int64_t layer, int64_t which, int64_t offset) {
    const bool latent = geometry_.latent > 0;
    const int64_t row_size = latent ? geometry_.latent
                                    : geometry_.kv_heads * geometry_.head_dim;
    const int64_t ways = latent ? 1 : 2;
    // Layer-major: one layer's blocks side by side, so that a sequence's
    // blocks (taken in order from the free list) are one stream to read.
    return storage_.data()
           + ((((layer * total_ + block) * ways + which)
                 * geometry_.block_tokens
               + offset)
              * row_size);
  }

  int32_t take_block();       // from the free list, else the LRU's oldest
  void forget(int32_t block); // unregisters it

  struct cached_entry {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    int32_t block = 0;
  };

  kv_geometry geometry_;
  int64_t total_;
  std::vector<float> storage_;
  std::vector<int32_t> free_;     // a stack: the most recently freed first
  std::vector<int32_t> holders_;  // per block
  std::vector<uint64_t> hash_of_; // per block; 0: none
  std::unordered_map<uint64_t, cached_entry> cached_; // by chain hash
  std::list<int32_t> lru_; // cached, held by no one; oldest first
  std::vector<std::list<int32_t>::iterator> lru_at_; // per block
};

} // namespace tutti::serve
