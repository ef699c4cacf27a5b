#pragma once
// Runs a whole job in this process: an actor system with the coordinator
// and one node supervisor hosting every rank (the embedded default of
// `tutti run`).

#include <atomic>
#include <memory>
#include <string>

#include "tutti/config/job_config.hpp"

namespace tutti::store {
class job_store;
}

namespace tutti {

struct job_result {
  bool ok = false;
  std::string message;        // why it failed
  double final_eval_loss = 0; // NaN when not evaluated
};

// Blocks until the job ends or `interrupt` becomes true (then returns a
// failed result saying so).
job_result run_local_job(const job_config& cfg, bool quiet,
                         const std::atomic<bool>& interrupt,
                         std::shared_ptr<store::job_store> db,
                         int64_t resume_step);

} // namespace tutti
