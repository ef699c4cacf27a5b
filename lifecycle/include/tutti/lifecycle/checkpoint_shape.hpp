#pragma once
// Whether a checkpoint fits a config: rank 0's shard records the model's
// shape and the world it was taken in (rank_checkpoint.cpp), which must
// equal the config's before a job continues from it.

#include <filesystem>

#include "tutti/base/status.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti::lifecycle {

// Fails with the first differing key, as "model.hidden_size: the
// checkpoint in DIR has 32, the config 64", or why the shard is unreadable.
status check_checkpoint_shape(const std::filesystem::path& checkpoint_dir,
                              const job_config& cfg);

} // namespace tutti::lifecycle
