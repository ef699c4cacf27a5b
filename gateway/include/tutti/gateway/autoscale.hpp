#pragma once
// Scaling the stable group on queue length: when the outstanding requests
// per serving replica (or the median TTFT, if bounded) stay above
// autoscale.scale_up_queue for scale_up_after_s, one more replica serves:
// a warm spare (started, model loaded) at once, else a new one that serves
// once its /ready answers. When nothing is outstanding for
// scale_down_idle_s, one replica above min_replicas leaves (back to a
// spare if spares are short, else drained and stopped). warm_spares are
// kept started while serving replicas are below max_replicas. Runs with
// the fleet's lock held; `start` starts a replica of the stable config.

#include <functional>
#include <memory>

#include "tutti/gateway/fleet.hpp"

namespace tutti::gateway {

using replica_starter =
  std::function<std::shared_ptr<replica>(replica_role role)>;

void autoscale(fleet& f, clock::time_point now, const replica_starter& start);
// Draining replicas with nothing outstanding are stopped and dropped.
void retire_drained(fleet& f);

} // namespace tutti::gateway
