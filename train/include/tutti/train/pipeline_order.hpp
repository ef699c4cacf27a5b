#pragma once
// The order in which one pipeline stage runs the step's forward and
// backward passes: Megatron's 1F1B, and with v > 1 model chunks per stage
// its interleaved 1F1B. One pure function of (stages, chunks,
// micro-batches, stage), so every rank, the memory plan and the tests
// derive the same schedule.
//
// Interleaved: the k-th forward of a stage runs chunk (k / p) % v on
// micro-batch (k / (p v)) p + k % p (each chunk takes p micro-batches
// before the next chunk does), the k-th backward the same micro-batch on
// chunk v - 1 - (k / p) % v; stage s warms up with (p - s - 1) 2 + (v - 1) p
// forwards, then alternates one forward and one backward, then cools down.
// Its bubble is (p - 1) / (v m + p - 1) of the step, against plain 1F1B's
// (p - 1) / (m + p - 1).

#include <cstdint>
#include <vector>

namespace tutti::train {

struct pipeline_op {
  bool forward = true;
  int64_t micro = 0; // micro-batch
  int64_t chunk = 0; // model chunk of this stage (0 without interleaving)
};

// Stage `stage` of `stages`, `chunks` model chunks each, over
// `micro_batches` (a multiple of `stages` when chunks > 1).
std::vector<pipeline_op> pipeline_order(int64_t stages, int64_t chunks,
                                        int64_t micro_batches, int64_t stage);

// The most micro-batches whose activations `stage` holds at once under
// pipeline_order (a micro-batch's from its first forward to its last
// backward): always a window of consecutive micro-batches.
int64_t micro_batches_in_flight(int64_t stages, int64_t chunks,
                                int64_t micro_batches, int64_t stage);

} // namespace tutti::train
