#pragma once
// Rack-limited routing, as DeepSeek-V3 limits each token to a few nodes:
// the group-limited router (moe_config.n_group, topk_group) keeps each
// token's experts within topk_group groups, so when every group's experts
// sit in one rack a token's experts span at most topk_group racks. Whether
// a job's layout makes that so is a property of the EP group's racks and
// the expert placement, read here once a job and said in its start line.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/config/job_config.hpp"

namespace tutti::moe {

struct rack_routing {
  int64_t racks = 1;         // racks of the EP group
  bool rack_limited = false; // every group's experts in one rack
  std::string spanning;      // the first group that is not, in words
};

// The EP group of `world_rank`; `slot_of_expert` is the placement
// ([layer][expert] -> slot of the EP group), empty for the contiguous one.
rack_routing rack_routing_of(const job_config& cfg, int64_t world_rank,
                             const std::vector<int32_t>& slot_of_expert);

// One clause for the job's start line ("" where there is nothing to say:
// one rack, or routing not group-limited).
std::string rack_routing_note(const job_config& cfg, const rack_routing& r);

} // namespace tutti::moe
