#pragma once
// Internal: the JSON of the two files the store reads (checkpoint MANIFEST,
// safetensors header), parsed by nlohmann-json into a small tree that keeps
// what those formats need and nlohmann's own tree does not: keys in file
// order, duplicate keys refused, numbers with their exact text (integers are
// converted exactly by the caller, never via double). Strict on purpose:
// these files are integrity-checked formats, so anything RFC 8259 forbids
// (trailing commas, comments, bad escapes, invalid UTF-8, duplicate keys,
// leading zeros) is an error with the byte offset, never a guess.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::store::detail::json {

struct value {
  enum class kind { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  std::string text;         // string: decoded UTF-8; number: source token
  std::vector<value> items; // array elements, or object values
  std::vector<std::string>
    keys; // object keys, in file order (keys[i] -> items[i])

  // Object member by key, or nullptr (also when this is not an object).
  const value* find(std::string_view key) const;
  // Exact integer conversion; false for fractions, exponents, overflow, non-numbers.
  bool as_int64(std::int64_t& out) const;
  bool as_uint64(std::uint64_t& out) const;
};

// Parses one JSON document; only whitespace may follow it. The error is
// "<what> at offset N" (the caller prefixes the file name).
expected<value> parse(std::string_view text);

// `s` as a quoted JSON string literal (escapes quotes, backslash, controls).
std::string quote(std::string_view s);

} // namespace tutti::store::detail::json
