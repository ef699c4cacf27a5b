#pragma once
// Gathers for checkpoints: member to member 0 of a group, and, under
// pipeline parallelism, the stages' layers joined on stage 0 (the ranks
// that write a one-stage job's files), tensor by tensor.

#include <cstdint>
#include <vector>

#include "tutti/protocol/local_messages.hpp"
#include "tutti/base/status.hpp"
#include "tutti/comm/communicator.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/kernels/tensor.hpp"

namespace tutti {

// Every member's `counts[member]` floats (`mine`, on the stream's device,
// consumed), member after member, on member 0 only (empty elsewhere).
expected<std::vector<float>> gather_to_first(comm::communicator& group,
                                             const kernels::stream& s,
                                             kernels::tensor<float> mine,
                                             const std::vector<int64_t>& counts);

// A stage's dense values (`local`: its tensors of its TP rank's
// stage_layout, consumed) joined over the stages `pp` on stage 0, in the
// one-stage layout's order; empty on the other stages.
expected<std::vector<float>> join_stages(comm::communicator& pp,
                                         const kernels::stream& s,
                                         const job_config& cfg,
                                         std::vector<float> local);

// A stage's expert shard snapshot (its layers) joined over the stages on
// stage 0: the whole model's layers in order, as a one-stage shard's;
// null on the other stages.
expected<rank_snapshot_ptr> join_stage_experts(comm::communicator& pp,
                                               const kernels::stream& s,
                                               const job_config& cfg,
                                               rank_snapshot_ptr shard);

} // namespace tutti
