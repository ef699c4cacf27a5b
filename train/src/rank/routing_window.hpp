#pragma once
// The rank's side of routing statistics: the router's choices of this
// rank's tokens are counted every step, and at the end of each window
// (moe_config.routing_stats_window steps, and the last step) summed over
// the world in one all-reduce; rank 0 hands the window on (as JSON) in its
// step report. Counting is a pass over the top-k ids already on the host;
// the all-reduce is once per window.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/comm/communicator.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/placement/routing_stats.hpp"

namespace tutti {

class routing_window {
public:
  explicit routing_window(const job_config& cfg);

  // Where the model appends this step's routing (null when off).
  std::vector<int32_t>* ids_for_step();
  // Counts the step's routing; at a window's end sums over `world` and, on
  // rank 0, leaves the window's JSON in `json_out`. Every rank calls it at
  // every step (the all-reduce is collective).
  status after_step(int64_t step, comm::communicator& world, bool rank0,
                    std::string& json_out);

private:
  status count_step();

  int64_t window_ = 0, last_step_ = 0, micro_batches_ = 1;
  std::vector<bool> routed_; // [layer]: false for a dense layer
  std::vector<int32_t> ids_;
  placement::routing_stats counts_;
};

} // namespace tutti
