#pragma once
// The vocabulary of a config key's declaration. Each section of the job
// config has one visit_fields overload (job_config.hpp) that names its keys,
// in the style of CAF's inspect():
//
//   v.field("combine_chunks", c.combine_chunks, "doc", at_least(1, "..."));
//
// A visitor receives (name, member, doc, options...) and picks the options
// it understands: the YAML reader `required`, `auto_means_zero` and
// `byte_size` and the rules (checked as each value is read), the
// fingerprint `not_fingerprinted`, the key reference all of them. The
// member's initialiser is the key's default.
//
// A member is a scalar (integer, number, bool, string, a named enum, a
// text value such as host_port), a list of scalars, a section (a type with
// its own visit_fields), a list of sections, or a key_group: a section
// whose keys are declared in place over members of the enclosing struct.

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "tutti/config/host_port.hpp"

namespace tutti::config {

// The key must be given (a section: must be present).
struct required_t {};
inline constexpr required_t required{};

// Nodes of one job need not agree on the key: it stays out of the
// fingerprint that a joining daemon's config is compared by.
struct not_fingerprinted_t {};
inline constexpr not_fingerprinted_t not_fingerprinted{};

// An integer that may also be written `auto`, read as 0.
struct auto_means_zero_t {};
inline constexpr auto_means_zero_t auto_means_zero{};

// An integer that may be written with a unit: 64MiB, 1GiB, 512KiB or a
// plain byte count.
struct byte_size_t {};
inline constexpr byte_size_t byte_size{};

// The key reference's default column says this instead of the member's
// initialiser (which then only means "not given").
struct default_text {
  const char* text;
};

// A section whose keys the reference does not list again: they are those
// of the section named here (a manifest's spec.serve holds serve's keys).
struct same_keys_as {
  const char* section;
};

// A number's allowed interval. The refusal reads "must be >= 1 (1 = no
// overlap)", or `message` verbatim when one is given.
struct rule {
  double low = -std::numeric_limits<double>::infinity();
  double high = std::numeric_limits<double>::infinity();
  bool low_open = false;
  bool high_open = false;
  const char* note = nullptr;    // what a boundary value means
  const char* message = nullptr; // replaces the generated text

  constexpr bool holds(double x) const {
    return (low_open ? x > low : x >= low)
           && (high_open ? x < high : x <= high);
  }

  // "must be ..." without the key.
  std::string text() const {
    if (message)
      return message;
    return "must be " + condition()
           + (note ? std::string(" (") + note + ")" : std::string());
  }

  // ">= 1", "in (0, 1]", "1": the condition alone, for the key reference.
  std::string condition() const {
    const bool bounded_low = std::isfinite(low);
    const bool bounded_high = std::isfinite(high);
    if (bounded_low && bounded_high && low == high)
      return number(low);
    if (bounded_low && bounded_high)
      return std::string("in ") + (low_open ? "(" : "[") + number(low) + ", "
             + number(high) + (high_open ? ")" : "]");
    if (bounded_low)
      return (low_open ? "> " : ">= ") + number(low);
    return (high_open ? "< " : "<= ") + number(high);
  }

  static std::string number(double x) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", x);
    return buf;
  }
};

constexpr rule at_least(double x, const char* note = nullptr) {
  return {.low = x, .note = note};
}
constexpr rule above(double x, const char* note = nullptr) {
  return {.low = x, .low_open = true, .note = note};
}
constexpr rule at_most(double x, const char* note = nullptr) {
  return {.high = x, .note = note};
}
constexpr rule below(double x, const char* note = nullptr) {
  return {.high = x, .high_open = true, .note = note};
}
// [low, high) and the like: in_range(0, 1, "[)").
constexpr rule in_range(double low, double high, const char (&brackets)[3]) {
  return {.low = low,
          .high = high,
          .low_open = brackets[0] == '(',
          .high_open = brackets[1] == ')'};
}
// A rule with its own refusal text.
constexpr rule with_message(rule r, const char* message) {
  r.message = message;
  return r;
}

// A string that must not be empty; `message` is the refusal. On a list:
// the list must hold an entry, and every string in it must not be empty.
struct not_empty {
  const char* message = "must not be empty";
};

// A YAML value tutti accepts and does not read (a manifest's
// metadata.labels, which deployment tools use): any scalar, list or
// mapping.
struct ignored_value {};

// A section declared in place: `declare(v)` names its keys over members
// that live elsewhere (serve.replan's keys are serve_config members, the
// gateway's `gateway:` keys are gateway_config's own). Made by keys_of().
template <class Declare>
struct key_group {
  Declare declare;
};

template <class Declare>
key_group<Declare> keys_of(Declare declare) {
  return {std::move(declare)};
}

template <class Visitor, class Declare>
void visit_fields(Visitor& v, key_group<Declare>& g) {
  g.declare(v);
}

} // namespace tutti::config
