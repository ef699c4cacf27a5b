#pragma once
// Number and string formatting shared by the text and JSON renderers.

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>

#include "tutti/protocol/shell_messages.hpp"

namespace tutti::render {

using json = nlohmann::ordered_json;

// `x` with `digits` decimals, as text.
inline std::string fixed(double x, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

// `x` to `digits` decimals, as the text shows it (JSON numbers).
inline double rounded(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::isfinite(x) ? std::round(x * scale) / scale : x;
}

// Compact JSON; bytes that are not UTF-8 (a log line may hold any) become
// U+FFFD instead of failing the answer.
inline std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A service's `status` (tutti serve) comes as its JSON object in `lines`,
// `message` "service" (client/service_client.hpp), not as a job's.
inline bool is_service_status(const shell_reply& reply) {
  return reply.ok && reply.message == "service" && reply.lines.size() == 1;
}

} // namespace tutti::render
