#pragma once
// A rank's side of checkpoints: what goes into its shard file at a step
// boundary, and how it comes back on resume. Rank 0 holds the replicated
// dense weights, their AdamW moments and the router biases; the ranks of the
// first expert-data-parallel replica (stage 0, TP index 0, dp_rank <
// ep_size: world ranks q * tp) hold their experts. Files hold whole tensors
// of the whole model: under pipeline parallelism the later stages' ranks
// send their layers to stage 0's (which are those ranks), TP ranks their
// slices to TP index 0, and on resume each rank takes its own part.

#include <caf/blocking_actor.hpp>

#include "shard/shard_executor.hpp"
#include "rank/rank_actor.hpp"
#include "tutti/train/rank_model.hpp"

namespace tutti {

// Copies the rank's state (and its expert shard's) to host memory.
status take_snapshot(const rank_args& a, train::rank_model& model,
                     shard_executor& experts, int64_t step,
                     rank_snapshot_ptr& out);

// Loads checkpoint `step` into the model and the expert shard.
status restore_snapshot(const rank_args& a, train::rank_model& model,
                        shard_executor& experts, int64_t step);

} // namespace tutti
