#pragma once
// A job's config versions: the first start is version 1, and every later
// start with a changed config (or a rollback) adds one, recording who, when,
// the whole config and what changed. A change that alters the model's shape
// is refused with the key named: it is a different job.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti::lifecycle {

// "2026-12-01T04:52:00Z"; "-" for 0.
std::string utc_text(int64_t unix_ms);

// "user@host (COMMAND)": who records a version from this process.
std::string who_am_i(const std::string& command);

// Every key of `cfg` as "section.key=value" lines (config_values).
std::string values_text(const job_config& cfg);

// The keys that differ between two values texts, one line each:
// "train.lr: 0.003 -> 0.001" (absent on one side: "(absent)").
std::vector<std::string> diff_values(const std::string& from,
                                     const std::string& to);

// The keys that fix the shape of the weights: a config differing in one of
// them cannot continue the job (the parallel layout may change).
const std::vector<std::string>& shape_keys();

// The first shape key whose value differs between two values texts, as
// "model.hidden_size: 32 in version 1, 64 in this config"; "" when none.
std::string shape_difference(const std::string& recorded,
                             const std::string& proposed,
                             const std::string& recorded_name);

// Records the config a job (re)starts with, before it starts. A first
// start or a changed config adds a version (`reason` for a change is
// "change" unless given) and makes it the job's spec; the same config as
// the newest version adds none. A changed model shape is refused (the
// message names the key). Returns the version the job runs.
expected<int64_t> record_start(store::job_store& db, const job_config& cfg,
                               const std::string& config_yaml,
                               const std::string& who,
                               const std::string& reason = "");

// The stored versions, ascending; a store from before versions existed
// but with a job spec answers that spec as version 1.
expected<std::vector<store::config_version_record>> history(
  store::job_store& db);

// The answer to the shell's `config history` ({"history"}) or `config diff
// V1 V2` ({"diff", "V1", "V2"}), as the command line prints it.
expected<std::vector<std::string>> version_lines(
  store::job_store& db, const std::vector<std::string>& args);

} // namespace tutti::lifecycle
