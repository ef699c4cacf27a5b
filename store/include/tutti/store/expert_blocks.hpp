#pragma once
// Which experts a checkpoint shard's expert blocks hold. A rank's shard
// file stores each layer's experts as blocks [count, out, in] in the order
// the rank holds them; under a placement those are any experts, listed in
// the header string "expert_ids" (layer after layer, ';' between layers,
// ',' between rows). Files without it (written before placements) hold
// first_expert + row. Readers (resume, export, serve, sample) name each
// block row by this.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace tutti::store {

struct block_experts {
  std::vector<std::vector<int64_t>> ids; // [layer][row]; empty: first + row
  int64_t first = 0;

  int64_t at(int64_t layer, int64_t row) const {
    return ids.empty() ? first + row : ids.at(layer).at(row);
  }
};

// A malformed list is an error naming the key.
expected<block_experts> block_experts_of(const shard_meta& meta);

// The header text for `ids` [layer][row].
std::string block_experts_text(const std::vector<std::vector<int64_t>>& ids);

} // namespace tutti::store
