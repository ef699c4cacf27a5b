#pragma once
// What the visitors of this part need to know about a declared field: is it
// a section (has visit_fields), a list of sections, an enum; which options
// it was declared with; how its value is written out.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "tutti/config/job_config.hpp"

namespace tutti::config {

// Accepts any field: only used to ask whether visit_fields(v, x) exists.
struct probe_visitor {
  template <class T, class... Options>
  void field(const char*, T&, const char*, const Options&...) {}
};

template <class T>
concept section = requires(probe_visitor& v, T& x) {
  visit_fields(v, x);
};

template <class T>
struct list_of_sections : std::false_type {};
template <section T>
struct list_of_sections<std::vector<T>> : std::true_type {
  using element = T;
};

template <class Wanted, class... Options>
constexpr bool has_option = (std::is_same_v<Wanted, Options> || ...);

struct name_collector {
  std::vector<std::string> names;
  template <class U, class... Options>
  void field(const char* name, U&, const char*, const Options&...) {
    names.emplace_back(name);
  }
};

// The keys a section declares, in order.
template <section T>
std::vector<std::string> field_names() {
  name_collector c;
  T sample{};
  visit_fields(c, sample);
  return c.names;
}

// "a, b, c" of a section's keys.
template <section T>
std::string field_list() {
  std::string out;
  for (const auto& name : field_names<T>())
    out += (out.empty() ? "" : ", ") + name;
  return out;
}

// The shortest text that reads back as the same double; whole numbers
// without an exponent.
inline std::string shortest_text(double x) {
  if (x == std::trunc(x) && std::fabs(x) < 1e15)
    return std::to_string(static_cast<int64_t>(x));
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x)
      break;
  }
  return buf;
}

// A value as the fingerprint writes it (exact: doubles with 17 digits).
inline std::string exact_text(double x) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", x);
  return buf;
}
inline std::string exact_text(int64_t x) { return std::to_string(x); }
inline std::string exact_text(uint64_t x) { return std::to_string(x); }
inline std::string exact_text(bool x) { return x ? "true" : "false"; }
inline std::string exact_text(const std::string& x) { return x; }
template <named_enum E>
std::string exact_text(E x) {
  return to_string(x);
}

// A scalar's kind, as a refusal names it ("expected an integer").
template <class T>
std::string expected_kind() {
  if constexpr (std::is_same_v<T, bool>)
    return "true or false";
  else if constexpr (named_enum<T>)
    return enum_choices<T>();
  else if constexpr (std::is_integral_v<T>)
    return "an integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else
    return "a string";
}

} // namespace tutti::config
