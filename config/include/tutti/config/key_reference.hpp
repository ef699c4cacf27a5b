#pragma once
// The key reference: a Markdown table of every declared config key (key,
// type, default, allowed values, doc), generated from the visit_fields
// declarations. README.md carries it between the markers below, and a test
// (config_keys_readme) fails when the two differ.

#include <string>

namespace tutti {

inline constexpr const char* key_reference_begin = "<!-- config-keys:begin -->";
inline constexpr const char* key_reference_end = "<!-- config-keys:end -->";

// The table, each line ending in '\n'.
std::string config_key_reference();

} // namespace tutti
