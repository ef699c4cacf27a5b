#include "remote_sequences.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace tutti::serve {

int64_t wanted_rows(const seq_chunk& c) {
  return c.want == seq_chunk::logits::all    ? c.count
         : c.want == seq_chunk::logits::last ? 1
                                             : 0;
}

namespace {

// Per chunk: rank, count, start, want, block count, tokens, blocks.
constexpr int64_t chunk_fields = 5;

} // namespace

std::vector<int64_t> encode_chunks(
  const std::vector<std::vector<seq_chunk>>& remote) {
  std::vector<int64_t> buf;
  for (size_t p = 0; p < remote.size(); ++p)
    for (const auto& c : remote[p]) {
      buf.insert(buf.end(),
                 {int64_t(p), c.count, c.start, int64_t(c.want),
                  int64_t(c.blocks ? c.blocks->size() : 0)});
      buf.insert(buf.end(), c.tokens, c.tokens + c.count);
      if (c.blocks) // none: the follower's engine refuses the chunk
        buf.insert(buf.end(), c.blocks->begin(), c.blocks->end());
    }
  return buf;
}

namespace {

status decode(const std::vector<int64_t>& buf, int64_t me,
              int64_t cache_blocks, received_chunks& mine) {
  mine = {};
  const int64_t n = static_cast<int64_t>(buf.size());
  for (int64_t at = 0; at < n;) {
    if (n - at < chunk_fields)
      return status::error("the chunks node 0 sent end inside a chunk");
    const int64_t p = buf[at], count = buf[at + 1], start = buf[at + 2],
                  want = buf[at + 3], blocks = buf[at + 4];
    at += chunk_fields;
    if (p < 1 || count < 1 || start < 0 || want < 0 || want > 2
        || blocks < 0 || n - at < count + blocks)
      return status::error("the chunks node 0 sent hold a malformed chunk");
    if (p == me) {
      // Checked as sent, before they narrow to int32.
      for (int64_t i = 0; i < count; ++i)
        if (buf[at + i] < 0 || buf[at + i] > INT32_MAX)
          return status::error("node 0 sent token " + std::to_string(buf[at + i]));
      for (int64_t i = count; i < count + blocks; ++i)
        if (buf[at + i] < 0 || buf[at + i] >= cache_blocks)
          return status::error("node 0 sent block " + std::to_string(buf[at + i])
                               + " of a cache of "
                               + std::to_string(cache_blocks));
      mine.tokens.emplace_back(buf.begin() + at, buf.begin() + at + count);
      mine.blocks.emplace_back(buf.begin() + at + count,
                               buf.begin() + at + count + blocks);
      seq_chunk c;
      c.count = count;
      c.start = start;
      c.want = static_cast<seq_chunk::logits>(want);
      c.rank = static_cast<int32_t>(me);
      mine.chunks.push_back(c);
    }
    at += count + blocks;
  }
  // The vectors no longer move: point the chunks into them.
  for (size_t i = 0; i < mine.chunks.size(); ++i) {
    mine.chunks[i].tokens = mine.tokens[i].data();
    mine.chunks[i].blocks = &mine.blocks[i];
  }
  return {};
}

} // namespace

status share_chunks(comm::communicator& comm, std::vector<int64_t>& words,
                    int64_t cache_blocks, received_chunks& mine) {
  if (!words.empty())
    TUTTI_RETURN_IF_ERROR(comm.all_reduce_sum(words.data(), words.size()));
  if (comm.rank() == 0) {
    mine = {};
    return {};
  }
  return decode(words, comm.rank(), cache_blocks, mine);
}

status gather_logits(comm::communicator& comm, int64_t vocab,
                     const std::vector<std::vector<seq_chunk>>& remote,
                     const std::vector<float>& mine,
                     std::vector<std::vector<float>>& out) {
  const int64_t P = comm.size();
  std::vector<int64_t> send_n(P, 0), recv_n(P, 0);
  if (comm.rank() == 0) {
    for (int64_t p = 1; p < P && p < static_cast<int64_t>(remote.size()); ++p)
      for (const auto& c : remote[p])
        recv_n[p] += wanted_rows(c) * vocab;
  } else {
    send_n[0] = static_cast<int64_t>(mine.size());
  }
  int64_t total = 0;
  for (auto n : recv_n)
    total += n;
  std::vector<float> got(total);
  TUTTI_RETURN_IF_ERROR(
    comm.all_to_all_v(mine.data(), send_n, got.data(), recv_n, sizeof(float)));
  out.assign(P, {});
  int64_t at = 0;
  for (int64_t p = 0; p < P; ++p) {
    out[p].assign(got.begin() + at, got.begin() + at + recv_n[p]);
    at += recv_n[p];
  }
  return {};
}

} // namespace tutti::serve
