// The fingerprint: every declared key not marked not_fingerprinted, written
// exactly, plus where each node listens.

#include <charconv>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <type_traits>

#include "field_traits.hpp"

namespace tutti {
namespace {

using entries = std::vector<std::pair<std::string, std::string>>;

class fingerprinter {
public:
  // `every_key`: not_fingerprinted keys too (lists of sections aside).
  fingerprinter(std::string prefix, entries& out, bool every_key = false)
    : prefix_(std::move(prefix)), out_(out), every_key_(every_key) {}

  template <class T, class... Options>
  void field(const char* name, T& value, const char*, const Options&...) {
    if constexpr (config::has_option<config::not_fingerprinted_t,
                                     Options...> && !config::section<T>) {
      if constexpr (!config::list_of_sections<T>::value)
        if (every_key_)
          out_.emplace_back(prefix_ + name, readable_text(value));
      return;
    } else if constexpr (config::has_option<config::not_fingerprinted_t,
                                            Options...>) {
      if (!every_key_)
        return;
      fingerprinter inner(prefix_ + name + ".", out_, every_key_);
      visit_fields(inner, value);
    } else if constexpr (config::section<T>) {
      fingerprinter inner(prefix_ + name + ".", out_, every_key_);
      visit_fields(inner, value);
    } else {
      static_assert(!config::list_of_sections<T>::value,
                    "a list in the fingerprint needs its own text");
      out_.emplace_back(prefix_ + name, every_key_ ? readable_text(value)
                                                   : config::exact_text(value));
    }
  }

private:
  // For people (config versions and their diffs): a double as its shortest
  // text that reads back the same (0.003, not 0.0030000000000000001).
  template <class T>
  static std::string readable_text(const T& value) {
    if constexpr (std::is_same_v<T, double>) {
      char buf[32];
      auto done = std::to_chars(buf, buf + sizeof buf, value);
      return std::string(buf, done.ptr);
    } else {
      return config::exact_text(value);
    }
  }

  std::string prefix_;
  entries& out_;
  bool every_key_ = false;
};

// moe_config.placement by what the plan says, not where it lies: nodes
// must train with the same plan, each reading its own copy. FNV-1a over
// the file's bytes (the same on every platform).
std::string plan_digest(const std::string& path) {
  if (path.empty())
    return "contiguous";
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return "unreadable";
  uint64_t h = 1469598103934665603ull;
  for (auto i = std::istreambuf_iterator<char>(in);
       i != std::istreambuf_iterator<char>(); ++i) {
    h ^= static_cast<unsigned char>(*i);
    h *= 1099511628211ull;
  }
  char text[32];
  std::snprintf(text, sizeof text, "fnv1a64:%016llx",
                static_cast<unsigned long long>(h));
  return text;
}

} // namespace

static entries config_entries(const job_config& c, bool every_key) {
  entries out;
  fingerprinter top("", out, every_key);
  // Visitors take their object mutable (as CAF's inspectors do); this one
  // only reads.
  visit_fields(top, const_cast<job_config&>(c));
  // The plan's content (the path itself is not fingerprinted).
  out.emplace_back("moe_config.placement_plan", plan_digest(c.moe.placement));
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

entries config_fingerprint(const job_config& c) {
  return config_entries(c, false);
}

entries config_values(const job_config& c) { return config_entries(c, true); }

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
