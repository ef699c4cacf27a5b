#pragma once
// The layout a training job runs on while some of its nodes are gone: the
// same model, global batch, tensor and pipeline sizes, on fewer nodes and
// so a smaller data-parallel size. Batches are a pure function of the step
// and losses do not depend on the data-parallel split, so the job goes on
// with the losses it would have had (within float rounding).

#include <functional>
#include <string>
#include <vector>

#include "tutti/config/job_config.hpp"

namespace tutti::elastic {

// The job's config as it runs on `nodes` (node ranks of `full`, ascending):
// their addresses and racks, nnodes and world_size for them, and ep_size
// the largest one up to full's that divides the experts and the smaller
// data-parallel size (with another ep_size, moe_config.placement's plan no
// longer applies: the experts are contiguous). The node at index i of
// `nodes` runs world ranks i * nproc_per_node onward. `nodes` equal to all
// of full's: full itself.
job_config config_on_nodes(const job_config& full,
                           const std::vector<int64_t>& nodes);

struct shrunk_layout {
  std::vector<int64_t> nodes; // the nodes that train, ascending
  std::vector<int64_t> idle;  // survivors the layout has no room for
  job_config cfg;             // config_on_nodes(full, nodes)
  std::string summary;        // for the event log, one line
};

// Whether a layout's ranks can hold it (the memory plan against
// cluster_config.device_memory_gb, which the training part knows): ok, or
// one line naming why not.
using layout_fits = std::function<status(const job_config&)>;

// The most of `survivors` (node ranks, at least elastic.min_nodes of
// them) whose layout passes the config's checks and `fits`; otherwise one
// line naming why none does and the key to change.
expected<shrunk_layout> shrink_layout(const job_config& full,
                                      std::vector<int64_t> survivors,
                                      const layout_fits& fits = {});

} // namespace tutti::elastic
