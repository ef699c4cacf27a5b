#pragma once
// data_loader: one rank's batches, a pure function of (seed, step, rank)
// (and, with data.rack_affinity, of the epoch's placement), prepared ahead
// of the rank in a prefetch queue. Detached: it reads files.

#include <memory>

#include "tutti/protocol/interfaces.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/placement/plan.hpp"

namespace tutti {

struct data_loader_args {
  job_config cfg;
  int32_t rank = 0; // global
  // The epoch's placement, for data.rack_affinity (null otherwise).
  std::shared_ptr<const placement::placement_plan> plan;
};

data_loader_actor spawn_data_loader(caf::actor_system& sys,
                                    data_loader_args args);

} // namespace tutti
