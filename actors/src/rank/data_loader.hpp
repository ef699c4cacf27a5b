#pragma once
// data_loader: one rank's batches, a pure function of (seed, step, rank),
// prepared ahead of the rank in a prefetch queue. Detached: it reads files.

#include "tutti/actors/interfaces.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti {

struct data_loader_args {
  job_config cfg;
  int32_t rank = 0; // global
};

data_loader_actor spawn_data_loader(caf::actor_system& sys,
                                    data_loader_args args);

} // namespace tutti
