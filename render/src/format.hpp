#pragma once
// Number and string formatting shared by the text and JSON renderers.

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace tutti::render {

// `x` with `digits` decimals.
inline std::string fixed(double x, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

// `s` as a JSON string (json_string and escaped; invalid UTF-8 replaced).
inline std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false,
                                nlohmann::json::error_handler_t::replace);
}

} // namespace tutti::render
