#pragma once
// Where a job starts when a daemon (or `tutti run`) starts: from scratch, or
// after the newest committed checkpoint whose shards verify. A corrupt or
// partial checkpoint is reported by file name, recorded as an event and
// skipped for the one before it.

#include <memory>
#include <string>

#include "tutti/config/job_config.hpp"

namespace tutti::store {
class job_store;
}

namespace tutti {

struct resume_point {
  enum kind { fresh, resume, completed, refused } what = fresh;
  int64_t step = 0;    // the checkpoint to load (resume), or the last step
  std::string message; // for the operator: why, what was skipped
};

// Opens nothing: `db` is the daemon's store. Records the job spec on a fresh
// start and the resume as an event.
resume_point find_resume_point(store::job_store& db, const job_config& cfg,
                               const std::string& config_yaml);

// Forgets the job: clears the store, removes the checkpoints and metrics.
status forget_job(store::job_store& db, const job_config& cfg);

} // namespace tutti
