#pragma once
// The checks that relate a job_config's keys to each other. Each key on its
// own was checked against its declared rules as it was read
// (yaml_reader.hpp).

#include "tutti/config/job_config.hpp"

namespace tutti::config {

// The first impossible combination of keys (each key is already in its
// own range: no division by zero here).
status check_across_keys(const job_config& c);

} // namespace tutti::config
