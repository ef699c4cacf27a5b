// One table row per section and per key, from the declarations of a
// default config (so the default column is the member initialisers, or a
// declaration's default_text).

#include "tutti/config/key_reference.hpp"

#include "field_traits.hpp"
#include "tutti/config/gateway_config.hpp"
#include "tutti/config/serve_config.hpp"
#include "yaml_reader.hpp"

namespace tutti {
namespace {

template <class T>
std::string scalar_type_text() {
  if constexpr (named_enum<T>)
    return enum_choices<T>(" \\| ", " \\| ");
  else if constexpr (std::is_same_v<T, bool>)
    return "true/false";
  else if constexpr (config::text_value<T>)
    return "HOST:PORT";
  else if constexpr (std::is_same_v<T, uint64_t>)
    return "unsigned integer";
  else if constexpr (std::is_integral_v<T>)
    return "integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "number";
  else
    return "string";
}

template <class T, class... Options>
std::string type_column() {
  if constexpr (config::section<T>)
    return "section";
  else if constexpr (config::list_of_sections<T>::value)
    return "list of {"
           + config::field_list<typename config::list_of_sections<T>::element>()
           + "}";
  else if constexpr (config::list_of_values<T>::value)
    return config::expected_list_kind<
             typename config::list_of_values<T>::element>()
      .substr(2); // "list of strings"
  else if constexpr (std::is_same_v<T, config::ignored_value>)
    return "any";
  else if constexpr (config::has_option<config::byte_size_t, Options...>)
    return "bytes: N, NKiB, NMiB or NGiB";
  else if constexpr (config::has_option<config::auto_means_zero_t, Options...>)
    return "integer or auto";
  else
    return scalar_type_text<T>();
}

template <class T>
std::string scalar_text(const T& value) {
  if constexpr (std::is_floating_point_v<T>)
    return config::shortest_text(value);
  else if constexpr (config::text_value<T>)
    return value_text(value);
  else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return std::to_string(value);
  else
    return config::exact_text(value); // bool, enum, string
}

template <class T, class... Options>
std::string default_column(const T& value, const Options&... options) {
  const auto* described = config::find_option<config::default_text>(options...);
  if constexpr (config::has_option<config::required_t, Options...>) {
    return "required";
  } else if (described) {
    return described->text;
  } else if constexpr (config::section<T>) {
    return "";
  } else if constexpr (std::is_same_v<T, config::ignored_value>) {
    return "";
  } else if constexpr (config::list_of_sections<T>::value) {
    return value.empty() ? "`[]`" : "";
  } else if constexpr (config::list_of_values<T>::value) {
    std::string items;
    for (const auto& item : value)
      items += (items.empty() ? "" : ", ") + scalar_text(item);
    return "`[" + items + "]`";
  } else if constexpr (config::has_option<config::auto_means_zero_t,
                                          Options...>) {
    return value == 0 ? "`auto`" : "`" + std::to_string(value) + "`";
  } else if constexpr (config::has_option<config::byte_size_t, Options...>) {
    return "`" + config::byte_size_text(value) + "`";
  } else {
    const auto text = scalar_text(value);
    return text.empty() ? "" : "`" + text + "`";
  }
}

// The allowed column: a rule or not_empty (on a list: of each entry).
template <class T>
std::string allowed_column(const config::rule& r) {
  return std::string(config::list_of_values<T>::value ? "each " : "")
         + r.condition() + (r.note ? std::string(" (") + r.note + ")" : "");
}
template <class T>
std::string allowed_column(const config::not_empty&) {
  return "not empty";
}
template <class T, class Other>
std::string allowed_column(const Other&) {
  return "";
}

class reference_writer {
public:
  reference_writer(std::string prefix, std::string& out)
    : prefix_(std::move(prefix)), out_(out) {}

  template <class T, class... Options>
  void field(const char* name, T& value, const char* doc,
             const Options&... options) {
    const auto key = prefix_ + name;
    std::string allowed;
    const std::vector<std::string> parts{allowed_column<T>(options)...};
    for (const auto& part : parts)
      if (!part.empty())
        allowed += (allowed.empty() ? "" : ", ") + part;
    std::string doc_text = doc;
    const auto* same_as = config::find_option<config::same_keys_as>(options...);
    if (same_as)
      doc_text += std::string(": the keys of `") + same_as->section + "`";
    out_ += "| `" + key + "` | " + type_column<T, Options...>() + " | "
            + default_column(value, options...) + " | " + allowed + " | "
            + doc_text + " |\n";
    if (same_as)
      return;
    if constexpr (config::section<T>) {
      reference_writer inner(key + ".", out_);
      visit_fields(inner, value);
    } else if constexpr (config::list_of_sections<T>::value) {
      typename config::list_of_sections<T>::element element{};
      reference_writer inner(key + "[].", out_);
      visit_fields(inner, element);
    }
  }

private:
  std::string prefix_;
  std::string& out_;
};

const char* table_head = "| key | type | default | allowed | doc |\n"
                         "| --- | --- | --- | --- | --- |\n";

// The table of a document whose top-level keys `declare(writer)` names.
template <class Declare>
std::string table(Declare declare) {
  std::string out = table_head;
  reference_writer writer("", out);
  declare(writer);
  return out;
}

} // namespace

std::string job_key_reference() {
  job_config defaults;
  return table([&](auto& w) { visit_fields(w, defaults); });
}

std::string serve_key_reference() {
  serve::serve_config defaults;
  return table([&](auto& w) { serve::visit_serve_file(w, defaults); });
}

std::string manifest_key_reference() {
  serve::serve_config defaults;
  return table([&](auto& w) { serve::visit_manifest(w, defaults); });
}

std::string gateway_key_reference() {
  gateway::gateway_config defaults;
  return table([&](auto& w) { visit_fields(w, defaults); });
}

} // namespace tutti
