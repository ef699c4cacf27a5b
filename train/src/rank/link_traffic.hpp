#pragma once
// A rank's all-to-all bytes split by the link class they crossed (same
// rank, intra_node, intra_rack, inter_rack), for metrics.jsonl.

#include <cstdint>
#include <vector>

#include "tutti/config/job_config.hpp"

namespace tutti {

// bytes_to[p]: bytes this rank sent to member p of its EP group.
std::vector<int64_t> bytes_by_link(const job_config& cfg, int64_t rank,
                                   const std::vector<int64_t>& bytes_to);

} // namespace tutti
