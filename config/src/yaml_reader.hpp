#pragma once
// YAML -> a config struct by its declared fields (field.hpp), for the job's
// sections, serve's and the gateway's alike. Every mapping's keys are
// checked first (plain, unique, declared), then each declared key is read
// by its member's type and checked against its declared rules as it is
// read (a key not given keeps its default, unchecked: "0 = off" defaults
// may lie outside the range a written value must be in). The first
// refusal wins, as one line naming the key path.

#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "field_traits.hpp"

namespace tutti::config {

// The key paths a file gave, sections included ("serve.replan"): for
// defaults that depend on whether a key was written.
using given_keys = std::set<std::string>;

status refusal(const std::string& key, const std::string& why);

// The keys of mapping `map`: plain names, each once, each in `known`.
// `where` names the mapping, `prefix` goes before each key, `word` is
// "section" or "key".
status check_keys(const YAML::Node& map, const std::string& where,
                  const std::string& prefix,
                  const std::vector<std::string>& known, const char* word);

// "67108864", "64MiB", "1GiB", "512KiB" as bytes.
status parse_byte_size(const std::string& text, int64_t& out);
std::string byte_size_text(int64_t bytes); // the largest exact unit

// "a mapping" or "a list", for "expected X, got a mapping".
std::string node_kind(const YAML::Node& node);

// Whether `text` is written as a whole number: some yaml-cpp versions
// read "1.5" as an integer by truncation.
bool written_whole(const std::string& text);

// One value against one option: the rules and not_empty; other options
// are for other visitors.
template <class T>
status check_value(const std::string& path, const T& value, const rule& r) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
    if (!r.holds(static_cast<double>(value)))
      return refusal(path, r.text());
  return {};
}
template <class T>
status check_value(const std::string& path, const T& value,
                   const not_empty& r) {
  if constexpr (std::is_same_v<T, std::string>)
    if (value.empty())
      return refusal(path, r.message);
  return {};
}
template <class T, class Other>
status check_value(const std::string&, const T&, const Other&) {
  return {};
}

class reader {
public:
  // `map` is a mapping whose keys were checked; `prefix` is "model." etc.
  reader(const YAML::Node& map, std::string prefix, given_keys* given)
    : map_(map), prefix_(std::move(prefix)), given_(given) {}

  template <class T, class... Options>
  void field(const char* name, T& out, const char*, const Options&... options) {
    if (!failure_.ok())
      return;
    const auto path = prefix_ + name;
    const YAML::Node value = std::as_const(map_)[name];
    if (!value || value.IsNull()) {
      if constexpr (has_option<required_t, Options...>)
        failure_ = refusal(path, section<T> ? "missing section" : "missing");
      return;
    }
    if (given_)
      given_->insert(path);
    if constexpr (std::is_same_v<T, ignored_value>)
      return;
    else if constexpr (section<T>)
      failure_ = read_section(value, path, out, given_);
    else if constexpr (list_of_sections<T>::value)
      failure_ = read_list(value, path, out, given_);
    else if constexpr (list_of_values<T>::value)
      failure_ = read_values(value, path, out, options...);
    else if (!value.IsScalar())
      failure_ = refusal(path, "expected " + kind_of<T, Options...>() + ", got "
                                 + node_kind(value));
    else
      failure_ = read_scalar<T, Options...>(value, path, out, options...);
  }

  const status& result() const { return failure_; }

  // A mapping nested at `path`, read into `out`.
  template <section T>
  static status read_section(const YAML::Node& node, const std::string& path,
                             T& out, given_keys* given) {
    if (!node.IsMap())
      return refusal(path, "expected a mapping of keys");
    TUTTI_RETURN_IF_ERROR(
      check_keys(node, path, path + ".", field_names(out), "key"));
    reader inner(node, path + ".", given);
    visit_fields(inner, out);
    return inner.result();
  }

private:
  template <class T, class... Options>
  static std::string kind_of() {
    if constexpr (has_option<byte_size_t, Options...>)
      return "a byte count";
    else
      return expected_kind<T>();
  }

  // `nodes: [{host, port, rack}, ...]`: a list of one section's mappings.
  template <class List>
  static status read_list(const YAML::Node& node, const std::string& path,
                          List& out, given_keys* given) {
    using element = typename list_of_sections<List>::element;
    const auto keys = field_list<element>();
    if (!node.IsSequence())
      return refusal(path, "expected a list of {" + keys + "}");
    out.clear();
    for (std::size_t i = 0; i < node.size(); ++i) {
      const auto where = path + "[" + std::to_string(i) + "]";
      const YAML::Node item = node[i];
      if (!item.IsMap())
        return refusal(where, "expected a mapping with " + keys);
      element e{};
      TUTTI_RETURN_IF_ERROR(read_section(item, where, e, given));
      out.push_back(std::move(e));
    }
    return {};
  }

  // `racks: [a, b]`: each entry read and checked as a scalar of the
  // element's type (the rules hold for each); not_empty: at least one.
  template <class List, class... Options>
  static status read_values(const YAML::Node& node, const std::string& path,
                            List& out, const Options&... options) {
    using element = typename list_of_values<List>::element;
    const auto kind = expected_list_kind<element>();
    if (!node.IsSequence())
      return refusal(path, "expected " + kind + ", got "
                             + (node.IsScalar() ? "'" + node.Scalar() + "'"
                                                : node_kind(node)));
    List list;
    for (std::size_t i = 0; i < node.size(); ++i) {
      const auto where = path + "[" + std::to_string(i) + "]";
      const YAML::Node item = node[i];
      if (!item.IsScalar())
        return refusal(where, "expected " + kind_of<element, Options...>()
                                + ", got " + node_kind(item));
      element e{};
      TUTTI_RETURN_IF_ERROR((convert<element, Options...>(item, where, e)));
      TUTTI_RETURN_IF_ERROR(check_element(where, e, options...));
      list.push_back(std::move(e));
    }
    if constexpr (has_option<not_empty, Options...>)
      if (list.empty())
        return refusal(path, find_option<not_empty>(options...)->message);
    out = std::move(list);
    return {};
  }

  template <class T, class... Options>
  static status read_scalar(const YAML::Node& value, const std::string& path,
                            T& out, const Options&... options) {
    TUTTI_RETURN_IF_ERROR((convert<T, Options...>(value, path, out)));
    status checked;
    ((checked = checked.ok() ? check_value(path, out, options) : checked), ...);
    return checked;
  }

  // An entry of a list: each rule holds for it; a list that must not be
  // empty holds no empty strings either.
  template <class T, class... Options>
  static status check_element(const std::string& where, const T& value,
                              const Options&... options) {
    status checked;
    ((checked = checked.ok() ? check_entry(where, value, options) : checked),
     ...);
    return checked;
  }
  template <class T, class Option>
  static status check_entry(const std::string& where, const T& value,
                            const Option& option) {
    if constexpr (std::is_same_v<Option, not_empty>)
      return check_value(where, value, not_empty{});
    else
      return check_value(where, value, option);
  }

  template <class T, class... Options>
  static status convert(const YAML::Node& value, const std::string& path,
                        T& out) {
    const auto& text = value.Scalar();
    if constexpr (has_option<auto_means_zero_t, Options...>) {
      if (text == "auto") {
        out = 0;
        return {};
      }
    }
    if constexpr (has_option<byte_size_t, Options...>) {
      if (auto s = parse_byte_size(text, out); !s.ok())
        return refusal(path, s.message());
    } else if constexpr (named_enum<T>) {
      auto parsed = from_string<T>(text);
      if (!parsed)
        return refusal(path,
                       "must be " + enum_choices<T>() + ", got '" + text + "'");
      out = *parsed;
    } else if constexpr (text_value<T>) {
      if (auto s = value_from_text(text, out); !s.ok())
        return refusal(path, s.message());
    } else {
      constexpr bool integer =
        std::is_integral_v<T> && !std::is_same_v<T, bool>;
      constexpr bool narrow = integer && sizeof(T) < sizeof(int64_t);
      try {
        if constexpr (integer)
          if (!written_whole(text))
            throw YAML::TypedBadConversion<T>(value.Mark());
        if constexpr (narrow) {
          // Narrow integers (a port) are read wide, then range-checked,
          // so 70000 is refused rather than wrapped.
          const auto wide = value.as<int64_t>();
          if (wide < std::numeric_limits<T>::min()
              || wide > std::numeric_limits<T>::max())
            return refusal(
              path, "must be in ["
                      + std::to_string(std::numeric_limits<T>::min()) + ", "
                      + std::to_string(std::numeric_limits<T>::max())
                      + "], got '" + text + "'");
          out = static_cast<T>(wide);
        } else {
          out = value.as<T>();
        }
      } catch (const YAML::Exception&) {
        return refusal(path, "expected " + expected_kind<T>() + ", got '" + text
                               + "'");
      }
      if constexpr (std::is_floating_point_v<T>)
        if (!std::isfinite(out))
          return refusal(path, "must be a finite number, got '" + text + "'");
    }
    return {};
  }

  YAML::Node map_;
  std::string prefix_;
  given_keys* given_;
  status failure_;
};

// Reads mapping `root` into `out`, a type whose visit_fields declares the
// file's top-level keys; `word` is what refusals call those ("section",
// "key"). Refusals name the key path, without `source_name`.
template <section T>
status read_document(const YAML::Node& root, const std::string& source_name,
                     T& out, const char* word, given_keys* given = nullptr) {
  if (!root.IsMap())
    return status::error(source_name + ": expected a mapping of " + word + "s");
  TUTTI_RETURN_IF_ERROR(
    check_keys(root, source_name, "", field_names(out), word));
  reader top(root, "", given);
  visit_fields(top, out);
  return top.result();
}

} // namespace tutti::config
