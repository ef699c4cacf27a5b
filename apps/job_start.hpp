#pragma once
// What `tutti run` and `tuttid` (node 0) do before the coordinator starts:
// open the daemon's RocksDB, and continue the job from its newest verified
// checkpoint, start it fresh, or say it has already completed.

#include <memory>
#include <string>

#include "tutti/config/job_config.hpp"

namespace tutti::store {
class job_store;
}

namespace tutti::cli {

struct job_start {
  std::shared_ptr<store::job_store> db;
  int64_t resume_step = 0;
  bool completed = false; // nothing to do
  int status = 0;         // non-zero: exit with it (message printed)
};

// `fresh`: forget the job first; asks on the terminal unless `yes`.
job_start open_job(const job_config& cfg, const std::string& config_path,
                   const std::string& state_dir, bool fresh, bool yes,
                   const char* program);

// `tutti run`'s job, from the config file at `path`, in this process
// (also what `tutti rollback` restarts the job with). Returns the exit
// status.
int run_job_file(const std::string& path, bool quiet, bool fresh, bool yes);

} // namespace tutti::cli
