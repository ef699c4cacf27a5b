#pragma once
// serve.data_parallel_attention across daemons: every daemon's rank holds
// sequences, and node 0's rank, which gets each step from the scheduler,
// hands the others their chunks before the step and gathers their logits
// after it, over the group's communicator (ep_ranks.hpp). Two
// collectives a step more than experts-only followers take part in: the
// chunks (their length travels in the step's header) and the logits.

#include <cstdint>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/comm/communicator.hpp"
#include "tutti/serve/engine.hpp"

namespace tutti::serve {

// A follower's chunks as they arrived: `chunks` point into `tokens` and
// `blocks`, which this owns.
struct received_chunks {
  std::vector<std::vector<int32_t>> tokens, blocks;
  std::vector<seq_chunk> chunks;
};

// Rows of a chunk whose logits come back.
int64_t wanted_rows(const seq_chunk& c);

// Node 0's chunks for the other daemons, `remote[p]` for rank p, as the
// words share_chunks sends.
std::vector<int64_t> encode_chunks(
  const std::vector<std::vector<seq_chunk>>& remote);

// Node 0 (rank 0) sends `words` (encode_chunks'; the followers pass zeros
// of the same length, which the header told them); each follower receives
// its chunks into `mine`, refused unless every block id is below
// `cache_blocks`.
status share_chunks(comm::communicator& comm, std::vector<int64_t>& words,
                    int64_t cache_blocks, received_chunks& mine);

// Each follower sends its wanted rows' logits (`mine`, vocab floats a row)
// to rank 0, which receives rank p's into `out[p]`; rank 0 knows how many
// from `remote`, the chunks it sent.
status gather_logits(comm::communicator& comm, int64_t vocab,
                     const std::vector<std::vector<seq_chunk>>& remote,
                     const std::vector<float>& mine,
                     std::vector<std::vector<float>>& out);


} // namespace tutti::serve
