#pragma once
// The gray release of the canary version: it takes cfg.rollout.steps[i]
// percent of requests; a step that has lasted step_s with min_requests
// canary requests whose error rate, median TTFT and median TPOT are within
// the bounds of the stable version's (same step, same time) moves to the
// next; past the last step the canary is the stable version and the old
// replicas drain. Out of bounds, or every canary replica unhealthy or its
// breaker open, traffic returns to the stable version at once: an event
// and the rollback alert (tutti_gateway_rollback_alert). All of these run
// with the fleet's lock held.

#include <string>

#include "tutti/gateway/fleet.hpp"

namespace tutti::gateway {

void judge_rollout(fleet& f, clock::time_point now);
// The next step now (operator); false with the reason when there is none.
bool promote(fleet& f, const std::string& why, std::string& refused);
bool roll_back(fleet& f, const std::string& why, std::string& refused);

} // namespace tutti::gateway
