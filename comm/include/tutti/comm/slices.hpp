#pragma once
// How a reduce-scatter splits a buffer over a group: member r owns the r-th
// of n contiguous slices of ceil(count / n) elements (the last ones shorter
// or empty). The Gloo communicator's all-reduce and the distributed
// optimizer's shards use the same split, so both sum each slice in member
// order and agree to the bit.

#include <algorithm>
#include <cstdint>

namespace tutti::comm {

struct slice {
  int64_t first = 0; // in elements
  int64_t count = 0;
};

inline slice member_slice(int64_t count, int members, int member) {
  const int64_t per = (count + members - 1) / members;
  const int64_t first = std::min<int64_t>(count, per * member);
  return {first, std::min<int64_t>(per, count - first)};
}

} // namespace tutti::comm
