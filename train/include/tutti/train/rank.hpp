#pragma once
// What a process needs to know before it runs ranks: the device each rank
// computes on, and whether this build can run a config's ranks at all. The
// rank actor itself is internal (train/src/rank/rank_actor.hpp).

#include <string>

#include "tutti/kernels/stream.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti {

// The CUDA device a rank (and its expert shard) computes on: local rank i
// on GPU i % device count; -1 where the config says cluster_config.device:
// cpu.
int rank_device(const job_config& cfg, int32_t rank);

// train.gemm_precision, for the rank's and its shard's device streams.
kernels::gemm_precision gemm_precision_of(const job_config& cfg);

// Whether this process can run cfg's ranks; if not, why (communication
// backend or device not built or not answering).
status check_rank_device(const job_config& cfg);

} // namespace tutti
