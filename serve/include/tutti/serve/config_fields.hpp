#pragma once
// Reading the keys of a YAML mapping for the serving configs (serve:,
// gateway:): unknown or duplicate keys and bad values are refused in one
// line naming the key as `prefix` + key. An absent key leaves `out` as it
// was (its default).

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>

#include "tutti/base/status.hpp"

namespace tutti::serve {

status refuse(const std::string& key, const std::string& why);
// Keys of `map` must be among `known`; `prefix` names the mapping.
status check_keys(const YAML::Node& map, const std::string& prefix,
                  const std::set<std::string>& known);
status read_int(const YAML::Node& map, const std::string& prefix,
                const char* key, int64_t& out, int64_t min);
// Bytes as a whole number or with a KiB/MiB/GiB suffix.
status read_bytes(const YAML::Node& map, const std::string& prefix,
                  const char* key, int64_t& out);
// A number > 0.
status read_double(const YAML::Node& map, const std::string& prefix,
                   const char* key, double& out);
status read_string(const YAML::Node& map, const std::string& prefix,
                   const char* key, std::string& out);
status read_bool(const YAML::Node& map, const std::string& prefix,
                 const char* key, bool& out);

} // namespace tutti::serve
