#pragma once
// The placement a job trains with: moe_config.placement's plan file, checked
// against the job's shape, or the contiguous layout when none is named.

#include "tutti/base/status.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/placement/plan.hpp"

namespace tutti::placement {

// Reads and checks the plan (layers, experts and EP ranks must be the
// job's); errors name moe_config.placement and the file.
expected<placement_plan> plan_for(const job_config& cfg);

} // namespace tutti::placement
