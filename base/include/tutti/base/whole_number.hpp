#pragma once
// A whole number that is all of `text` ("12", "-3"; not "12x", "", " 1"):
// the parse every config field, port, shell argument and metric label
// needs, in one place.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace tutti {

inline std::optional<int64_t> whole_number(const std::string& text) {
  if (text.empty() || text.front() == ' ' || text.front() == '+')
    return std::nullopt;
  try {
    size_t used = 0;
    const auto value = std::stoll(text, &used);
    if (used != text.size())
      return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt; // not a number, or out of range
  }
}

} // namespace tutti
