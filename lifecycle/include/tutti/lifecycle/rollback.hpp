#pragma once
// `tutti rollback RUN_DIR --to-version V [--checkpoint STEP]`, the part
// before the job runs again: the store is made to continue the job from
// STEP on config version V (a new version, reason "rollback"), and the
// checkpoints after STEP are set aside (moved under the checkpoint root's
// rolled_back/, their records removed) so that resuming finds STEP.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti::lifecycle {

struct rollback_plan {
  int64_t from_version = 0;     // the version rolled back to
  int64_t new_version = 0;      // the version recorded for the restart
  int64_t step = 0;             // the checkpoint the job continues from
  std::filesystem::path config; // RUN_DIR/config-version-N.yaml
  std::string message;          // what was done, for the operator
};

// Fails, changing nothing, when V or STEP does not exist, the checkpoint
// does not verify, V's run.dir is not `run_dir`, or the checkpoint's model
// shape differs from V's (the message names the key). Without `step`, the
// newest committed checkpoint.
expected<rollback_plan> prepare_rollback(store::job_store& db,
                                         const std::filesystem::path& run_dir,
                                         int64_t version,
                                         std::optional<int64_t> step,
                                         const std::string& who);

} // namespace tutti::lifecycle
