// The fingerprint: every declared key not marked not_fingerprinted, written
// exactly, plus where each node listens.

#include <sstream>

#include "field_traits.hpp"

namespace tutti {
namespace {

using entries = std::vector<std::pair<std::string, std::string>>;

class fingerprinter {
public:
  fingerprinter(std::string prefix, entries& out)
    : prefix_(std::move(prefix)), out_(out) {}

  template <class T, class... Options>
  void field(const char* name, T& value, const char*, const Options&...) {
    if constexpr (config::has_option<config::not_fingerprinted_t, Options...>) {
      return;
    } else if constexpr (config::section<T>) {
      fingerprinter inner(prefix_ + name + ".", out_);
      visit_fields(inner, value);
    } else {
      static_assert(!config::list_of_sections<T>::value,
                    "a list in the fingerprint needs its own text");
      out_.emplace_back(prefix_ + name, config::exact_text(value));
    }
  }

private:
  std::string prefix_;
  entries& out_;
};

} // namespace

entries config_fingerprint(const job_config& c) {
  entries out;
  fingerprinter top("", out);
  // Visitors take their object mutable (as CAF's inspectors do); this one
  // only reads.
  visit_fields(top, const_cast<job_config&>(c));
  // Where each node listens, given or derived (nodes is not_fingerprinted
  // as written: this covers it, and host and the coordinator port when the
  // list is empty).
  const auto& cl = c.cluster;
  for (int64_t i = 0; i < cl.nnodes && i < 4096; ++i) {
    auto n = cl.node(i);
    out.emplace_back("cluster_config.nodes[" + std::to_string(i) + "]",
                     n.host + ":" + std::to_string(n.port) + " rack " + n.rack);
  }
  return out;
}

std::string fingerprint_text(const job_config& c) {
  std::ostringstream out;
  for (const auto& [key, value] : config_fingerprint(c))
    out << key << '=' << value << '\n';
  return out.str();
}

std::string first_difference(const std::string& ours,
                             const std::string& theirs) {
  std::istringstream a(ours), b(theirs);
  std::string la, lb;
  while (true) {
    bool ha = static_cast<bool>(std::getline(a, la));
    bool hb = static_cast<bool>(std::getline(b, lb));
    if (!ha && !hb)
      return "";
    if (la != lb || ha != hb) {
      auto key = (ha ? la : lb).substr(0, (ha ? la : lb).find('='));
      auto value = [](const std::string& line, bool has) {
        return has ? line.substr(line.find('=') + 1) : std::string("(absent)");
      };
      return key + ": " + value(la, ha) + " here, " + value(lb, hb) + " there";
    }
  }
}

} // namespace tutti
