#pragma once
// Validation of a read job_config: first each key on its own, by the rules
// its declaration names; then the checks that relate keys to each other.

#include "tutti/config/job_config.hpp"

namespace tutti::config {

// The first key outside its declared rules, as "section.key: must be ...".
status check_fields(job_config& c);

// The first impossible combination of keys (run after check_fields, so each
// key is already in its own range: no division by zero here).
status check_across_keys(const job_config& c);

} // namespace tutti::config
