#pragma once
// The CAF actor system configuration every tutti process uses: the type ID
// block, the error category, and (for daemons) the io middleman with its
// heartbeat and connection timeout set (CAF leaves both off by default).

#include <caf/actor_system_config.hpp>

#include <chrono>

#include "tutti/config/job_config.hpp"

namespace tutti {

struct system_options {
  bool network = false; // load the io middleman
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds connection_timeout{5000};
};

// A daemon's or `tutti run`'s: with the middleman, whose heartbeat and
// connection timeout are the job's (it notices a silent peer as fast as the
// coordinator does).
system_options network_options(const recovery_config& recovery);

class tutti_system_config : public caf::actor_system_config {
public:
  explicit tutti_system_config(const system_options& options = {});
};

} // namespace tutti
