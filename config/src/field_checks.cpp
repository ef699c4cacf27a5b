// The per-key pass: each declared rule and not_empty, over every field.

#include "checks.hpp"

#include "field_traits.hpp"

namespace tutti::config {
namespace {

class rule_checker {
public:
  explicit rule_checker(std::string prefix) : prefix_(std::move(prefix)) {}

  template <class T, class... Options>
  void field(const char* name, T& value, const char*,
             const Options&... options) {
    if (!failure_.ok())
      return;
    const auto path = prefix_ + name;
    if constexpr (section<T>) {
      failure_ = check(value, path + ".");
    } else if constexpr (list_of_sections<T>::value) {
      for (std::size_t i = 0; i < value.size() && failure_.ok(); ++i)
        failure_ = check(value[i], path + "[" + std::to_string(i) + "].");
    } else {
      (apply(path, value, options), ...);
    }
  }

  template <section T>
  static status check(T& value, const std::string& prefix) {
    rule_checker inner(prefix);
    visit_fields(inner, value);
    return inner.failure_;
  }

private:
  template <class T>
  void apply(const std::string& path, const T& value, const rule& r) {
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
      if (failure_.ok() && !r.holds(static_cast<double>(value)))
        failure_ = status::error(path + ": " + r.text());
  }
  template <class T>
  void apply(const std::string& path, const T& value, const not_empty& r) {
    if constexpr (std::is_same_v<T, std::string>)
      if (failure_.ok() && value.empty())
        failure_ = status::error(path + ": " + r.message);
  }
  // Options for other visitors.
  template <class T, class Other>
  void apply(const std::string&, const T&, const Other&) {}

  std::string prefix_;
  status failure_;
};

} // namespace

status check_fields(job_config& c) { return rule_checker::check(c, ""); }

} // namespace tutti::config
