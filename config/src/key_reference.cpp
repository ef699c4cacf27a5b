// One table row per section and per key, from the declarations of a
// default job_config (so the default column is the member initialisers).

#include "tutti/config/key_reference.hpp"

#include "field_traits.hpp"

namespace tutti {
namespace {

template <class T, class... Options>
std::string type_text() {
  if constexpr (config::section<T>)
    return "section";
  else if constexpr (config::list_of_sections<T>::value)
    return "list of {"
           + config::field_list<typename config::list_of_sections<T>::element>()
           + "}";
  else if constexpr (named_enum<T>)
    return enum_choices<T>(" \\| ", " \\| ");
  else if constexpr (std::is_same_v<T, bool>)
    return "true/false";
  else if constexpr (std::is_same_v<T, uint64_t>)
    return "unsigned integer";
  else if constexpr (std::is_integral_v<T>)
    return config::has_option<config::auto_means_zero_t, Options...>
             ? "integer or auto"
             : "integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "number";
  else
    return "string";
}

template <class T, class... Options>
std::string default_text(const T& value) {
  if constexpr (config::has_option<config::required_t, Options...>) {
    return "required";
  } else if constexpr (config::section<T>) {
    return "";
  } else if constexpr (config::list_of_sections<T>::value) {
    return value.empty() ? "`[]`" : "";
  } else if constexpr (config::has_option<config::auto_means_zero_t,
                                          Options...>) {
    return value == 0 ? "`auto`" : "`" + std::to_string(value) + "`";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "`" + config::shortest_text(value) + "`";
  } else {
    const auto text = config::exact_text(value);
    return text.empty() ? "" : "`" + text + "`";
  }
}

std::string allowed_text(const config::rule& r) {
  return r.condition() + (r.note ? std::string(" (") + r.note + ")" : "");
}
std::string allowed_text(const config::not_empty&) { return "not empty"; }
template <class Other>
std::string allowed_text(const Other&) {
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
    const std::vector<std::string> parts{allowed_text(options)...};
    for (const auto& part : parts)
      if (!part.empty())
        allowed += (allowed.empty() ? "" : ", ") + part;
    out_ += "| `" + key + "` | " + type_text<T, Options...>() + " | "
            + default_text<T, Options...>(value) + " | " + allowed + " | " + doc
            + " |\n";
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

} // namespace

std::string config_key_reference() {
  std::string out = "| key | type | default | allowed | doc |\n"
                    "| --- | --- | --- | --- | --- |\n";
  job_config defaults;
  reference_writer writer("", out);
  visit_fields(writer, defaults);
  return out;
}

} // namespace tutti
