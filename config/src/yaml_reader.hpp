#pragma once
// YAML -> job_config by the declared fields: strict about keys and types.

#include <string>

#include <yaml-cpp/yaml.h>

#include "tutti/config/job_config.hpp"

namespace tutti::config {

// Reads every section of `root` (a mapping) into `out`, or refuses the first
// unknown, duplicate, missing or mistyped key with one line naming it.
// Values are not range-checked here (checks.hpp).
status read_sections(const YAML::Node& root, const std::string& source_name,
                     job_config& out);

} // namespace tutti::config
