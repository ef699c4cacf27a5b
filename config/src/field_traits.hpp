#pragma once
// What the visitors of this part need to know about a declared field: is it
// a section (has visit_fields), a list of sections or of values, an enum,
// a text value; which options it was declared with; how its value is
// written out.

#include <cmath>
#include <concepts>
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

// A value read from and written as one string (host_port.hpp).
template <class T>
concept text_value = requires(const std::string& s, T& x) {
  { value_from_text(s, x) } -> std::same_as<status>;
  { value_text(x) } -> std::convertible_to<std::string>;
};

template <class T>
struct list_of_sections : std::false_type {};
template <section T>
struct list_of_sections<std::vector<T>> : std::true_type {
  using element = T;
};

// A list of scalars (racks: [a, b], steps: [1, 10]).
template <class T>
struct list_of_values : std::false_type {};
template <class T>
struct list_of_values<std::vector<T>> : std::bool_constant<!section<T>> {
  using element = T;
};

template <class Wanted, class... Options>
constexpr bool has_option = (std::is_same_v<Wanted, Options> || ...);

template <class Wanted, class Option>
const Wanted* option_if(const Option& o) {
  if constexpr (std::is_same_v<Wanted, Option>)
    return &o;
  else
    return nullptr;
}

// The first option of type Wanted among `options`, or null.
template <class Wanted, class... Options>
const Wanted* find_option(const Options&... options) {
  const Wanted* found = nullptr;
  ((found = found ? found : option_if<Wanted>(options)), ...);
  return found;
}

struct name_collector {
  std::vector<std::string> names;
  template <class U, class... Options>
  void field(const char* name, U&, const char*, const Options&...) {
    names.emplace_back(name);
  }
};

// The keys `value` declares, in order (a key_group's keys are declared
// over another object's members, so they are asked of the object itself).
template <section T>
std::vector<std::string> field_names(T& value) {
  name_collector c;
  visit_fields(c, value);
  return c.names;
}

// "a, b, c" of a section's keys.
template <section T>
std::string field_list() {
  T sample{};
  std::string out;
  for (const auto& name : field_names(sample))
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
// A list of values in YAML's flow form: [3, 4, 4].
template <class T>
std::string exact_text(const std::vector<T>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i ? ", " : "") + exact_text(xs[i]);
  return out + "]";
}

// A scalar's kind, as a refusal names it ("expected an integer").
template <class T>
std::string expected_kind() {
  if constexpr (std::is_same_v<T, bool>)
    return "true or false";
  else if constexpr (named_enum<T>)
    return enum_choices<T>();
  else if constexpr (text_value<T>)
    return "HOST:PORT";
  else if constexpr (std::is_integral_v<T>)
    return "an integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else
    return "a string";
}

// A list's kind: "a list of strings", "a list of HOST:PORT".
template <class T>
std::string expected_list_kind() {
  if constexpr (text_value<T>)
    return "a list of HOST:PORT";
  else if constexpr (std::is_same_v<T, std::string>)
    return "a list of strings";
  else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return "a list of integers";
  else if constexpr (std::is_floating_point_v<T>)
    return "a list of numbers";
  else
    return "a list of " + expected_kind<T>();
}

} // namespace tutti::config
