#pragma once
// A job config's model as it is before its first step (tutti's own
// initialisation from train.seed), in the tensors and metadata `tutti
// export` writes: a randomly initialised model to serve or benchmark
// without training one.

#include <vector>

#include "tutti/config/job_config.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/safetensors.hpp"

namespace tutti::cli {

// Hugging Face names, one tensor per expert; `meta` holds what a rank-0
// checkpoint shard records about the model.
void initial_weights(const job_config& cfg,
                     std::vector<store::named_tensor>& tensors,
                     store::shard_meta& meta);

} // namespace tutti::cli
