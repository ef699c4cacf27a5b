// Reads each section with the keys its visit_fields declares. Every
// mapping's keys are checked first (plain, unique, declared), then each
// declared key is read by its member's type. The first refusal wins.

#include "yaml_reader.hpp"

#include <cmath>
#include <set>
#include <utility>

#include "field_traits.hpp"

namespace tutti::config {
namespace {

status refusal(const std::string& key, const std::string& why) {
  return status::error(key + ": " + why);
}

// The keys of mapping `map`: plain names, each once, each declared in
// `known`. `where` names the mapping, `prefix` goes before each key, `word`
// is "section" or "key".
status check_keys(const YAML::Node& map, const std::string& where,
                  const std::string& prefix,
                  const std::vector<std::string>& known, const char* word) {
  const std::set<std::string> declared(known.begin(), known.end());
  std::set<std::string> seen;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar())
      return refusal(where, "keys must be plain names, not lists or mappings");
    const auto key = kv.first.Scalar();
    if (!seen.insert(key).second)
      return refusal(prefix + key, std::string("duplicate ") + word);
    if (!declared.count(key))
      return refusal(prefix + key, std::string("unknown ") + word);
  }
  return {};
}

template <class T>
T convert(const YAML::Node& value) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // yaml-cpp accepts "1.5" as an integer by truncation in some versions;
    // refuse anything that is not written as a whole number.
    if (value.Scalar().find_first_of(".eE") != std::string::npos)
      throw YAML::TypedBadConversion<T>(value.Mark());
  }
  return value.as<T>();
}

class reader {
public:
  // `map` is a mapping whose keys were checked; `prefix` is "model." etc.
  reader(const YAML::Node& map, std::string prefix)
    : map_(map), prefix_(std::move(prefix)) {}

  template <class T, class... Options>
  void field(const char* name, T& out, const char*, const Options&...) {
    if (!failure_.ok())
      return;
    const auto path = prefix_ + name;
    const YAML::Node value = std::as_const(map_)[name];
    if (!value || value.IsNull()) {
      if constexpr (has_option<required_t, Options...>)
        failure_ = refusal(path, section<T> ? "missing section" : "missing");
      return;
    }
    if constexpr (section<T>)
      failure_ = read_section(value, path, out);
    else if constexpr (list_of_sections<T>::value)
      failure_ = read_list(value, path, out);
    else
      failure_ = read_scalar<T, Options...>(value, path, out);
  }

  const status& result() const { return failure_; }

  // A mapping nested at `path`, read into `out`.
  template <section T>
  static status read_section(const YAML::Node& node, const std::string& path,
                             T& out) {
    if (!node.IsMap())
      return refusal(path, "expected a mapping of keys");
    TUTTI_RETURN_IF_ERROR(
      check_keys(node, path, path + ".", field_names<T>(), "key"));
    reader inner(node, path + ".");
    visit_fields(inner, out);
    return inner.result();
  }

private:
  // `nodes: [{host, port, rack}, ...]`: a list of one section's mappings.
  template <class List>
  static status read_list(const YAML::Node& node, const std::string& path,
                          List& out) {
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
      TUTTI_RETURN_IF_ERROR(read_section(item, where, e));
      out.push_back(std::move(e));
    }
    return {};
  }

  template <class T, class... Options>
  static status read_scalar(const YAML::Node& value, const std::string& path,
                            T& out) {
    if (!value.IsScalar())
      return refusal(path, "expected " + expected_kind<T>() + ", got a "
                             + (value.IsMap() ? "mapping" : "list"));
    const auto& text = value.Scalar();
    if constexpr (has_option<auto_means_zero_t, Options...>) {
      if (text == "auto") {
        out = 0;
        return {};
      }
    }
    if constexpr (named_enum<T>) {
      auto parsed = from_string<T>(text);
      if (!parsed)
        return refusal(path,
                       "must be " + enum_choices<T>() + ", got '" + text + "'");
      out = *parsed;
    } else {
      try {
        out = convert<T>(value);
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
  status failure_;
};

} // namespace

status read_sections(const YAML::Node& root, const std::string& source_name,
                     job_config& out) {
  if (!root.IsMap())
    return status::error(source_name + ": expected a mapping of sections");
  TUTTI_RETURN_IF_ERROR(
    check_keys(root, source_name, "", field_names<job_config>(), "section"));
  reader sections(root, "");
  visit_fields(sections, out);
  return sections.result();
}

} // namespace tutti::config
